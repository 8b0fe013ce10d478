// JSON Schemas (draft 2020-12) of the payload types, derived from the payload
// registry so that the schemas, validation and the REST codec share one source
// of truth. Values are described as the service accepts them: proto3 JSON.
import { getOption, hasOption } from "@bufbuild/protobuf";
import type { JsonObject } from "@bufbuild/protobuf";
import { rules } from "../../gen/resourcestore/type/v1/options_pb.js";
import { payloadTypes } from "./payload-registry.js";
import type { FieldInfo, PayloadType } from "./payload-registry.js";

const JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema";

const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;
// 2^63 is exactly representable as a double, so an exclusive bound is exact
// where 2^63 - 1 (which rounds up to 2^63) would not be.
const INT64_MIN = -9223372036854775808;
const INT64_EXCLUSIVE_MAX = 9223372036854775808;

/**
 * A regular expression body matching the decimal strings of 0..limit with
 * optional leading zeros: proto3 JSON carries int64 as strings, and a plain
 * `^-?[0-9]+$` would let out-of-range values through to the service.
 */
function upToDecimal(limit: string): string {
  const alternatives: string[] = [];
  if (limit.length > 1) alternatives.push(`[0-9]{1,${limit.length - 1}}`);
  for (let i = 0; i < limit.length; i += 1) {
    const digit = Number(limit[i]);
    if (digit === 0) continue;
    const rest = limit.length - i - 1;
    const lower = digit === 1 ? "0" : `[0-${digit - 1}]`;
    alternatives.push(`${limit.slice(0, i)}${lower}${rest > 0 ? `[0-9]{${rest}}` : ""}`);
  }
  alternatives.push(limit);
  return `0*(?:${alternatives.join("|")})`;
}

/** Decimal strings in the int64 range (proto3 JSON for int64). */
export const INT64_STRING_PATTERN = `^(?:-${upToDecimal("9223372036854775808")}|${upToDecimal("9223372036854775807")})$`;

/** An int64 as proto3 JSON accepts it: an integer or a decimal string, in range. */
function int64JsonSchema(): JsonObject {
  return {
    anyOf: [
      { type: "integer", minimum: INT64_MIN, exclusiveMaximum: INT64_EXCLUSIVE_MAX },
      { type: "string", pattern: INT64_STRING_PATTERN },
    ],
  };
}

/** A double as proto3 JSON accepts it: a number or one of the special strings. */
function doubleJsonSchema(): JsonObject {
  return { anyOf: [{ type: "number" }, { type: "string", enum: ["NaN", "Infinity", "-Infinity"] }] };
}

function stringJsonSchema(field: FieldInfo): JsonObject {
  const schema: JsonObject = { type: "string" };
  if (field.rules.oneOf) schema["enum"] = [...field.rules.oneOf];
  // The pattern as written in the .proto: RegExp.source would escape "/".
  if (field.rules.pattern) {
    schema["pattern"] = hasOption(field.desc, rules)
      ? getOption(field.desc, rules).pattern
      : field.rules.pattern.source;
  }
  if (field.rules.format) schema["format"] = field.rules.format;
  return schema;
}

/** The schema of one payload (or metadata) field's value, without null. */
export function fieldJsonSchema(field: FieldInfo): JsonObject {
  switch (field.kind) {
    case "string":
      return stringJsonSchema(field);
    case "int32":
      return { type: "integer", minimum: INT32_MIN, maximum: INT32_MAX };
    case "int64":
      return int64JsonSchema();
    case "double":
      return doubleJsonSchema();
    case "bool":
      return { type: "boolean" };
    case "string_list":
      return { type: "array", items: stringJsonSchema(field) };
    case "double_map":
      return { type: "object", additionalProperties: doubleJsonSchema() };
  }
}

/** The `$id` of a payload type's schema. */
function payloadSchemaId(payloadType: string): string {
  return `urn:resourcestore:payload:${payloadType}`;
}

function payloadJsonSchema(payload: PayloadType): JsonObject {
  const properties: JsonObject = {};
  for (const field of payload.fields) properties[field.name] = fieldJsonSchema(field);
  return {
    $schema: JSON_SCHEMA_DIALECT,
    $id: payloadSchemaId(payload.name),
    title: payload.name,
    description: `The payload fields of a ${payload.name} resource (${payload.message.typeName}), as proto3 JSON.`,
    type: "object",
    properties,
    required: payload.fields.filter((f) => f.required).map((f) => f.name),
    additionalProperties: false,
  };
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === "object") {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

let computed: Readonly<Record<string, JsonObject>> | undefined;

/**
 * payload_type -> its JSON Schema, in declaration order. Computed once and
 * frozen: callers that need to change a schema take a copy.
 */
export function payloadJsonSchemas(): Record<string, JsonObject> {
  if (!computed) {
    const out: Record<string, JsonObject> = {};
    for (const payload of payloadTypes.values()) out[payload.name] = payloadJsonSchema(payload);
    computed = deepFreeze(out);
  }
  return computed;
}
