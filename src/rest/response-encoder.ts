// Response message -> REST JSON, one writer for every message: proto field
// names, counts (64-bit integers) as numbers, repeated and map fields always
// present, implicit scalars always present, explicit-presence fields only
// when set unless marked (nullable) = true, then null. Payload messages,
// Structs and other well-known types keep their proto3 JSON.
import { ScalarType, toJson } from "@bufbuild/protobuf";
import type { DescField, DescMessage, JsonObject, JsonValue } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { base64Encode } from "@bufbuild/protobuf/wire";
import { isNullable, payloadMessages } from "../schema/payload-registry.js";
import type { Resource, ResourceUpdate } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { resourceToFlat, resourceTypeName, resourceUpdateTypeName, updateToFlat } from "../schema/flat-codec.js";
import type { FlatWriteOptions } from "../schema/flat-codec.js";

const payloadTypeNames: ReadonlySet<string> = new Set([...payloadMessages].map((m) => m.typeName));

function scalarToRest(scalar: ScalarType, value: unknown): JsonValue {
  switch (scalar) {
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return Number(value);
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return Number.isFinite(value) ? (value as number) : String(value);
    case ScalarType.BYTES:
      return base64Encode(value as Uint8Array);
    default:
      return value as JsonValue;
  }
}

function enumToRest(field: DescField, value: number): JsonValue {
  const desc = field.enum;
  return desc?.values.find((v) => v.number === value)?.name ?? value;
}

/** Any message value, dispatched by type. */
export function messageToRest(desc: DescMessage, message: unknown, opts: FlatWriteOptions): JsonValue {
  if (desc.typeName === resourceTypeName) return resourceToFlat(message as Resource, opts);
  if (desc.typeName === resourceUpdateTypeName) return updateToFlat(message as ResourceUpdate);
  // protobuf-es hands Struct fields over as plain JSON already.
  if (desc.typeName === "google.protobuf.Struct") return message as JsonObject;
  if (payloadTypeNames.has(desc.typeName) || desc.typeName.startsWith("google.protobuf.")) {
    return toJson(desc, message as never, { useProtoFieldName: true });
  }
  const out: JsonObject = {};
  for (const field of desc.fields) {
    const value = fieldToRest(field, message, opts);
    if (value !== undefined) out[field.name] = value;
  }
  return out;
}

function singularToRest(field: DescField, value: unknown, opts: FlatWriteOptions): JsonValue {
  switch (field.fieldKind) {
    case "message":
      return messageToRest(field.message, value, opts);
    case "enum":
      return enumToRest(field, value as number);
    case "scalar":
      return scalarToRest(field.scalar, value);
    default:
      return null;
  }
}

/** One field of a message: its REST JSON, or undefined to leave it out. */
export function fieldToRest(field: DescField, message: unknown, opts: FlatWriteOptions): JsonValue | undefined {
  const record = message as Record<string, unknown>;
  let value: unknown;
  if (field.oneof) {
    const group = record[field.oneof.localName] as { case: string | undefined; value?: unknown };
    value = group.case === field.localName ? group.value : undefined;
  } else {
    value = record[field.localName];
  }
  switch (field.fieldKind) {
    case "list": {
      const list = (value as unknown[] | undefined) ?? [];
      if (field.listKind === "message") return list.map((v) => messageToRest(field.message, v, opts));
      if (field.listKind === "enum") return list.map((v) => enumToRest(field, v as number));
      return list.map((v) => scalarToRest(field.scalar, v));
    }
    case "map": {
      const out: JsonObject = {};
      for (const [k, v] of Object.entries((value as Record<string, unknown> | undefined) ?? {})) {
        const mapped =
          field.mapKind === "message"
            ? messageToRest(field.message, v, opts)
            : field.mapKind === "enum"
              ? enumToRest(field, v as number)
              : scalarToRest(field.scalar, v);
        Object.defineProperty(out, k, { value: mapped, enumerable: true, writable: true, configurable: true });
      }
      return out;
    }
    default: {
      const implicit = field.presence === FeatureSet_FieldPresence.IMPLICIT && !field.oneof;
      if (value === undefined && !implicit) return isNullable(field) ? null : undefined;
      return singularToRest(field, value, opts);
    }
  }
}
