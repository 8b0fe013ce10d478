// REST request (path variables, query string, JSON body) -> the RPC's request
// message. The body is walked along the descriptors so unknown keys are
// caught by their proto name at every level and the flat shapes are
// unfolded; the values themselves are checked by a strict `fromJson`.
import { fromJson, ScalarType } from "@bufbuild/protobuf";
import type { DescField, DescMessage, JsonObject, JsonValue, MessageShape } from "@bufbuild/protobuf";
import { invalidArgument } from "../errors.js";
import {
  flatResourceToProtoJson,
  flatUpdateToProtoJson,
  isPlainObject,
  resourceTypeName,
  resourceUpdateTypeName,
} from "../schema/flat-codec.js";
import type { PathBinding } from "./path-template.js";

const fieldsByName = new WeakMap<DescMessage, ReadonlyMap<string, DescField>>();

function fieldByName(desc: DescMessage, name: string): DescField | undefined {
  let map = fieldsByName.get(desc);
  if (!map) {
    map = new Map(desc.fields.map((f) => [f.name, f]));
    fieldsByName.set(desc, map);
  }
  return map.get(name);
}

function isWellKnown(desc: DescMessage): boolean {
  return desc.typeName.startsWith("google.protobuf.");
}

function child(where: string, key: string): string {
  return where === "" ? key : `${where}.${key}`;
}

/** Own-property write that a "__proto__" map key cannot turn into a prototype change. */
function setOwn(obj: JsonObject, key: string, value: JsonValue): void {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
}

/**
 * REST JSON of a message -> its proto3 JSON (proto names). Throws
 * invalid_argument naming the first unknown key.
 */
function restToProtoJson(desc: DescMessage, json: unknown, where = ""): JsonValue {
  if (desc.typeName === resourceTypeName) return flatResourceToProtoJson(json, where);
  if (desc.typeName === resourceUpdateTypeName) return flatUpdateToProtoJson(json, where);
  if (isWellKnown(desc)) return json as JsonValue; // Struct, Value, FieldMask...: proto3 JSON as is
  if (!isPlainObject(json))
    throw invalidArgument(`${where === "" ? "the body" : where} must be a JSON object`, "MALFORMED_BODY");
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(json)) {
    const field = fieldByName(desc, key);
    if (!field) throw invalidArgument(`unknown field "${child(where, key)}"`, "UNKNOWN_FIELD");
    const name = child(where, key);
    if (value === null) {
      // null is "absent", except for a Value, where it is the JSON null.
      if (field.fieldKind === "message" && field.message.typeName === "google.protobuf.Value") out[key] = null;
      continue;
    }
    switch (field.fieldKind) {
      case "message":
        out[key] = restToProtoJson(field.message, value, name);
        break;
      case "list":
        if (field.listKind !== "message") {
          out[key] = value as JsonValue;
          break;
        }
        if (!Array.isArray(value)) throw invalidArgument(`${name} must be an array`);
        {
          const msg = field.message;
          out[key] = value.map((v, i) => restToProtoJson(msg, v, `${name}[${i}]`));
        }
        break;
      case "map":
        if (field.mapKind !== "message") {
          out[key] = value as JsonValue;
          break;
        }
        if (!isPlainObject(value)) throw invalidArgument(`${name} must be a JSON object`);
        {
          const msg = field.message;
          const map: JsonObject = {};
          for (const [k, v] of Object.entries(value))
            setOwn(map, k, restToProtoJson(msg, v, `${name}[${JSON.stringify(k)}]`));
          out[key] = map;
        }
        break;
      default:
        out[key] = value as JsonValue;
    }
  }
  return out;
}

const INT_RE = /^-?\d+$/;
const UINT_RE = /^\d+$/;
const INT32_MIN = -(2 ** 31);
const INT32_MAX = 2 ** 31 - 1;

/** One query or path value -> its proto3 JSON, typed by the field. */
function textToJson(field: DescField, scalar: ScalarType | undefined, text: string, name: string): JsonValue {
  if (scalar === undefined) return text; // enum: its name
  switch (scalar) {
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return text;
    case ScalarType.BOOL:
      if (text === "true") return true;
      if (text === "false") return false;
      throw invalidArgument(`${name} must be true or false, got "${text}"`);
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32: {
      const n = Number(text);
      if (!INT_RE.test(text) || n < INT32_MIN || n > INT32_MAX) {
        throw invalidArgument(`${name} must be a 32-bit integer, got "${text}"`);
      }
      return n;
    }
    case ScalarType.UINT32:
    case ScalarType.FIXED32: {
      const n = Number(text);
      if (!UINT_RE.test(text) || n > 2 ** 32 - 1)
        throw invalidArgument(`${name} must be an unsigned 32-bit integer, got "${text}"`);
      return n;
    }
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
    case ScalarType.UINT64:
    case ScalarType.FIXED64: {
      const unsigned = scalar === ScalarType.UINT64 || scalar === ScalarType.FIXED64;
      const ok = (unsigned ? UINT_RE : INT_RE).test(text);
      const v = ok ? BigInt(text) : 0n;
      const [min, max] = unsigned ? [0n, 2n ** 64n - 1n] : [-(2n ** 63n), 2n ** 63n - 1n];
      if (!ok || v < min || v > max) throw invalidArgument(`${name} must be a 64-bit integer, got "${text}"`);
      return text; // proto3 JSON carries 64-bit integers as strings
    }
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT: {
      if (text === "NaN" || text === "Infinity" || text === "-Infinity") return text;
      const n = Number(text);
      if (text.trim() === "" || !Number.isFinite(n)) throw invalidArgument(`${name} must be a number, got "${text}"`);
      return n;
    }
    default:
      throw invalidArgument(`${field.name} cannot be set from the URL`);
  }
}

/** Where a dotted parameter name lands: the parent object and the leaf field. */
function resolveParam(desc: DescMessage, root: JsonObject, fieldPath: readonly string[], name: string) {
  let msg = desc;
  let obj = root;
  for (let i = 0; i < fieldPath.length; i++) {
    const part = fieldPath[i] ?? "";
    const field = fieldByName(msg, part);
    if (!field) return undefined;
    if (i === fieldPath.length - 1) return { field, obj, key: part };
    if (field.fieldKind !== "message" || isWellKnown(field.message)) {
      throw invalidArgument(`${name} cannot be set from the URL`);
    }
    const next = obj[part];
    const nested: JsonObject = isPlainObject(next) ? next : {};
    obj[part] = nested;
    obj = nested;
    msg = field.message;
  }
  return undefined;
}

function assignParam(
  desc: DescMessage,
  root: JsonObject,
  fieldPath: readonly string[],
  values: readonly string[],
  kind: string,
): boolean {
  const name = `${kind} "${fieldPath.join(".")}"`;
  const target = resolveParam(desc, root, fieldPath, name);
  if (!target) return false;
  const { field, obj, key } = target;
  if (field.fieldKind === "list" && field.listKind !== "message") {
    obj[key] = values.map((v) => textToJson(field, field.listKind === "scalar" ? field.scalar : undefined, v, name));
    return true;
  }
  if (field.fieldKind !== "scalar" && field.fieldKind !== "enum")
    throw invalidArgument(`${name} cannot be set from the URL`);
  if (values.length !== 1) throw invalidArgument(`${name} is not repeated but was given ${values.length} times`);
  obj[key] = textToJson(field, field.fieldKind === "scalar" ? field.scalar : undefined, values[0] ?? "", name);
  return true;
}

export interface RestRequestParts {
  readonly bindings: readonly PathBinding[];
  readonly query: URLSearchParams;
  /** The parsed JSON body, or undefined when the rule takes none. */
  readonly body: unknown;
  /** The rule's `body`: "*", a top-level field name, or "". */
  readonly bodyField: string;
}

/** Builds the request message; every client mistake is invalid_argument. */
export function decodeRestRequest<Desc extends DescMessage>(desc: Desc, parts: RestRequestParts): MessageShape<Desc> {
  // A body naming one field is that field's REST JSON; wrapping it lets the
  // same walker unfold it (a flat Resource, say).
  // An absent body is the defaults; a JSON null is a body, and not an object.
  const bodyJson =
    parts.bodyField === "*"
      ? parts.body === undefined
        ? {}
        : parts.body
      : parts.bodyField !== "" && parts.body !== undefined
        ? { [parts.bodyField]: parts.body }
        : {};
  const json = restToProtoJson(desc, bodyJson) as JsonObject;
  const bound = new Set(parts.bindings.map((b) => b.fieldPath[0]));
  const names = [...new Set(parts.query.keys())];
  for (const name of names) {
    const path = name.split(".");
    const top = path[0] ?? "";
    // Fields the body covers (all of them for "*") or the path binds are not query parameters.
    const covered = parts.bodyField === "*" || top === parts.bodyField || bound.has(top);
    if (covered || !assignParam(desc, json, path, parts.query.getAll(name), "query parameter")) {
      throw invalidArgument(`unknown query parameter "${name}"`, "UNKNOWN_FIELD");
    }
  }
  for (const b of parts.bindings) {
    if (!assignParam(desc, json, b.fieldPath, [b.value], "path variable")) {
      throw invalidArgument(`path variable "${b.fieldPath.join(".")}" names no field`);
    }
  }
  try {
    return fromJson(desc, json, { ignoreUnknownFields: false });
  } catch (err) {
    throw invalidArgument(`invalid request: ${err instanceof Error ? err.message : String(err)}`);
  }
}
