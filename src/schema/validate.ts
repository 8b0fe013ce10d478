// Validation of resources, driven only by the payload registry (which reads
// the descriptors): value types come from a strict fromJson of the payload
// message, then required fields and the (rules) options are checked.
// Everything here is "malformed whatever is stored": invalid_argument.
import { fromJson, toJson } from "@bufbuild/protobuf";
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { invalidArgument } from "../errors.js";
import { isCalendarDate } from "../time.js";
import { metadataFieldByName, payloadTypeNames, payloadTypeOf } from "./payload-registry.js";
import type { FieldInfo, PayloadType } from "./payload-registry.js";

function patternOf(name: string): RegExp {
  const p = metadataFieldByName.get(name)?.rules.pattern;
  if (!p) throw new Error(`metadata field ${name} has no pattern`);
  return p;
}

const IDENTIFIER = patternOf("identifier");
const ACCESS_LEVELS = metadataFieldByName.get("access_level")?.rules.oneOf ?? [];

export const DEFAULT_ACCESS_LEVEL = "internal";

/** Throws invalid_argument unless `value` is a well-formed identifier. */
export function checkIdentifier(value: unknown, what = "identifier"): string {
  if (typeof value !== "string" || !IDENTIFIER.test(value)) {
    throw invalidArgument(`${what} ${JSON.stringify(value)} is not a valid identifier`);
  }
  return value;
}

export function checkIdentifiers(values: readonly unknown[], what = "identifier"): string[] {
  return values.map((v) => checkIdentifier(v, what));
}

export function checkAccessLevel(value: unknown): string {
  if (typeof value !== "string" || !ACCESS_LEVELS.includes(value)) {
    throw invalidArgument(`access_level must be one of ${ACCESS_LEVELS.join(", ")}`);
  }
  return value;
}

export function payloadTypeOrThrow(name: unknown): PayloadType {
  const t = typeof name === "string" ? payloadTypeOf(name) : undefined;
  if (!t) {
    throw invalidArgument(
      `unknown payload_type ${JSON.stringify(name)}; expected one of ${payloadTypeNames.join(", ")}`,
    );
  }
  return t;
}

function checkRules(type: PayloadType, field: FieldInfo, value: JsonValue): void {
  const values = Array.isArray(value) ? value : [value];
  for (const v of values) {
    if (typeof v !== "string") continue;
    const where = `${type.name}.${field.name}`;
    const { oneOf, pattern, format } = field.rules;
    if (oneOf && !oneOf.includes(v))
      throw invalidArgument(`${where} must be one of ${oneOf.join(", ")}`, "INVALID_PAYLOAD");
    if (pattern && !pattern.test(v))
      throw invalidArgument(`${where} does not match ${pattern.source}`, "INVALID_PAYLOAD");
    if (format === "date" && !isCalendarDate(v))
      throw invalidArgument(`${where} must be a calendar date YYYY-MM-DD`, "INVALID_PAYLOAD");
  }
}

/**
 * Checks a payload (flat field name -> proto3 JSON value; null = unset) of
 * `type` and returns its canonical proto3 JSON form (proto field names,
 * int64 as strings, unset fields absent).
 */
export function normalizePayload(
  type: PayloadType,
  payload: Readonly<Record<string, unknown>>,
  options: { readonly canonical?: boolean } = {},
): JsonObject {
  // A payload written by toJson of its typed message already has the right
  // names and value types: only the value rules are left to check. The
  // round trip below costs more than the rest of a create (docs/benchmarks/first-runs.md,
  // "What limits each miss").
  if (options.canonical === true) {
    checkPayloadRules(type, payload as JsonObject);
    return payload as JsonObject;
  }
  const input: JsonObject = {};
  for (const [key, value] of Object.entries(payload)) {
    if (!type.fieldByName.has(key))
      throw invalidArgument(`${type.name} has no field ${JSON.stringify(key)}`, "UNKNOWN_FIELD");
    if (value === null || value === undefined) continue;
    input[key] = value as JsonValue;
  }
  let canonical: JsonObject;
  try {
    const msg = fromJson(type.message, input, { ignoreUnknownFields: false });
    canonical = toJson(type.message, msg, { useProtoFieldName: true }) as JsonObject;
  } catch (err) {
    const detail = err instanceof Error ? err.message.replace(/^cannot decode [^:]*: ?/, "") : "";
    throw invalidArgument(`invalid ${type.name} payload${detail ? `: ${detail}` : ""}`, "INVALID_PAYLOAD");
  }
  checkPayloadRules(type, canonical);
  return canonical;
}

/** Required fields present, and every string value within its rules. */
function checkPayloadRules(type: PayloadType, canonical: JsonObject): void {
  for (const field of type.fields) {
    const value = canonical[field.name];
    if (value === undefined) {
      if (field.required) throw invalidArgument(`${type.name}.${field.name} is required`, "INVALID_PAYLOAD");
      continue;
    }
    checkRules(type, field, value);
  }
}

/** Merges changes (null clears) into a stored payload; the result is validated by normalizePayload. */
export function mergePayload(stored: JsonObject, changes: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...stored };
  for (const [k, v] of Object.entries(changes)) out[k] = v;
  return out;
}
