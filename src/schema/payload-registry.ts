// The payload types and their fields, read once from the descriptors.
// Validation, the query compiler, the REST codec, the JSON Schemas and the
// parquet writer all take their knowledge of payloads from here.
import { getOption, hasOption, ScalarType } from "@bufbuild/protobuf";
import type { DescField, DescMessage, DescOneof } from "@bufbuild/protobuf";
import { FieldBehavior, field_behavior } from "../../gen/google/api/field_behavior_pb.js";
import { nullable, rules } from "../../gen/resourcestore/type/v1/options_pb.js";
import { ResourceSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";

const nullableFields = new WeakMap<DescField, boolean>();

/**
 * Whether a field carries `(nullable) = true`: REST writes it as null when
 * unset. Remembered per field: reading an option decodes the field's options
 * again every time, and the REST writer asks for every unset field of every
 * message it writes.
 */
export function isNullable(field: DescField): boolean {
  let known = nullableFields.get(field);
  if (known === undefined) {
    known = hasOption(field, nullable) && getOption(field, nullable);
    nullableFields.set(field, known);
  }
  return known;
}

/** The value kinds a payload or metadata field can have. */
export type FieldKind = "string" | "int32" | "int64" | "double" | "bool" | "string_list" | "double_map";

interface FieldRulesInfo {
  /** Allowed values of an enum-like string. */
  readonly oneOf?: readonly string[];
  /** ECMAScript pattern the value must match. */
  readonly pattern?: RegExp;
  /** JSON Schema format name ("date"). */
  readonly format?: string;
}

export interface FieldInfo {
  /** The proto (and REST) field name, snake_case. */
  readonly name: string;
  readonly kind: FieldKind;
  readonly required: boolean;
  readonly outputOnly: boolean;
  readonly nullable: boolean;
  readonly rules: FieldRulesInfo;
  readonly desc: DescField;
}

export interface PayloadType {
  /** The payload_type string: the oneof member name ("study"). */
  readonly name: string;
  readonly message: DescMessage;
  /** The oneof member field of Resource. */
  readonly member: DescField;
  readonly fields: readonly FieldInfo[];
  readonly fieldByName: ReadonlyMap<string, FieldInfo>;
}

function kindOf(field: DescField): FieldKind {
  switch (field.fieldKind) {
    case "scalar":
      switch (field.scalar) {
        case ScalarType.STRING:
          return "string";
        case ScalarType.INT32:
        case ScalarType.SINT32:
        case ScalarType.SFIXED32:
          return "int32";
        case ScalarType.INT64:
        case ScalarType.SINT64:
        case ScalarType.SFIXED64:
          return "int64";
        case ScalarType.DOUBLE:
          return "double";
        case ScalarType.BOOL:
          return "bool";
        default:
          break;
      }
      break;
    case "list":
      if (field.listKind === "scalar" && field.scalar === ScalarType.STRING) return "string_list";
      break;
    case "map":
      if (field.mapKind === "scalar" && field.scalar === ScalarType.DOUBLE) return "double_map";
      break;
    default:
      break;
  }
  throw new Error(`field ${field.parent.typeName}.${field.name} has a kind the payload registry does not support`);
}

export function fieldInfo(field: DescField): FieldInfo {
  const behaviors = hasOption(field, field_behavior) ? getOption(field, field_behavior) : [];
  const r = hasOption(field, rules) ? getOption(field, rules) : undefined;
  const info: { oneOf?: string[]; pattern?: RegExp; format?: string } = {};
  if (r && r.oneOf.length > 0) info.oneOf = [...r.oneOf];
  if (r && r.pattern !== "") info.pattern = new RegExp(r.pattern, "u");
  if (r && r.format !== "") info.format = r.format;
  return {
    name: field.name,
    kind: kindOf(field),
    required: behaviors.includes(FieldBehavior.REQUIRED),
    outputOnly: behaviors.includes(FieldBehavior.OUTPUT_ONLY),
    nullable: isNullable(field),
    rules: info,
    desc: field,
  };
}

function payloadOneof(): DescOneof {
  const oneof = ResourceSchema.oneofs.find((o) => o.name === "payload");
  if (!oneof) throw new Error("Resource has no payload oneof");
  return oneof;
}

function buildPayloadTypes(): ReadonlyMap<string, PayloadType> {
  const out = new Map<string, PayloadType>();
  for (const member of payloadOneof().fields) {
    if (member.fieldKind !== "message") throw new Error(`payload member ${member.name} is not a message`);
    const fields = member.message.fields.map(fieldInfo);
    out.set(member.name, {
      name: member.name,
      message: member.message,
      member,
      fields,
      fieldByName: new Map(fields.map((f) => [f.name, f])),
    });
  }
  return out;
}

/** payload_type -> its descriptor-derived description, in declaration order. */
export const payloadTypes: ReadonlyMap<string, PayloadType> = buildPayloadTypes();

/** The payload_type names, in declaration order. */
export const payloadTypeNames: readonly string[] = [...payloadTypes.keys()];

/** The metadata fields of Resource: every field outside the payload oneof. */
export const metadataFields: readonly FieldInfo[] = ResourceSchema.fields
  .filter((f) => f.oneof === undefined)
  .map(fieldInfo);

export const metadataFieldByName: ReadonlyMap<string, FieldInfo> = new Map(metadataFields.map((f) => [f.name, f]));

/** The payload message descriptors, for "is this message a payload" checks. */
export const payloadMessages: ReadonlySet<DescMessage> = new Set([...payloadTypes.values()].map((p) => p.message));

export function payloadTypeOf(name: string): PayloadType | undefined {
  return payloadTypes.get(name);
}
