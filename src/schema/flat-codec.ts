// The flat shape of Resource and ResourceUpdate (REST bodies, the CLI's
// files and feed lines): metadata keys, a `payload_type` naming the `payload`
// oneof member, and that member's fields beside the metadata. Everything is read off the descriptors through the
// payload registry; no payload type is named here.
import { create, toJson } from "@bufbuild/protobuf";
import type { JsonObject, JsonValue, Message } from "@bufbuild/protobuf";
import { FieldMaskSchema } from "@bufbuild/protobuf/wkt";
import { invalidArgument } from "../errors.js";
import { fieldInfo, metadataFieldByName, metadataFields, payloadTypeNames, payloadTypes } from "./payload-registry.js";
import type { FieldInfo, PayloadType } from "./payload-registry.js";
import { payloadMessageToJson } from "./payload-json.js";
import { ResourceSchema, ResourceUpdateSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import type { Resource, ResourceUpdate } from "../../gen/resourcestore/type/v1/resource_pb.js";

export const resourceTypeName = ResourceSchema.typeName;
export const resourceUpdateTypeName = ResourceUpdateSchema.typeName;

const PAYLOAD_TYPE = "payload_type";
const IS_DELETED = "is_deleted";
const EXPECTED_VERSION = "expected_version";
// Fields of ResourceUpdate that carry the update's structure rather than a
// resource field; REST expresses them through the keys present.
const UPDATE_STRUCTURAL = new Set([IS_DELETED, EXPECTED_VERSION, "payload_fields", "update_mask"]);
const REST_FORBIDDEN_UPDATE_KEYS = new Set(["update_mask", "payload_fields"]);

/** Metadata fields an update may change, from the ResourceUpdate descriptor. */
const updateMetadataFields: ReadonlyMap<string, FieldInfo> = new Map(
  ResourceUpdateSchema.fields
    .filter((f) => f.oneof === undefined && !UPDATE_STRUCTURAL.has(f.name))
    .map((f) => [f.name, fieldInfo(f)]),
);
const isDeletedField = ResourceUpdateSchema.fields.find((f) => f.name === IS_DELETED);

/** Payload field name -> the payload types that have it. */
const payloadTypesByField: ReadonlyMap<string, readonly string[]> = (() => {
  const out = new Map<string, string[]>();
  for (const pt of payloadTypes.values()) {
    for (const f of pt.fields) out.set(f.name, [...(out.get(f.name) ?? []), pt.name]);
  }
  return out;
})();

/** Prefixes a message with where in the body it applies ("resources[2]"). */
function at(where: string, message: string): string {
  return where === "" ? message : `${where}: ${message}`;
}

/** A JSON object: not null, not an array. */
export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function expectObject(json: unknown, where: string, what: string): Record<string, unknown> {
  if (!isPlainObject(json)) throw invalidArgument(at(where, `${what} must be a JSON object`), "MALFORMED_BODY");
  return json;
}

function payloadTypeFrom(value: unknown, where: string): PayloadType {
  if (typeof value !== "string") throw invalidArgument(at(where, `payload_type must be a string`));
  const pt = payloadTypes.get(value);
  if (!pt) {
    throw invalidArgument(at(where, `unknown payload_type "${value}" (known: ${payloadTypeNames.join(", ")})`));
  }
  return pt;
}

/**
 * A flat REST resource -> the proto3 JSON of Resource (proto field names),
 * ready for `fromJson`. Values are not checked here: `fromJson` does that.
 */
export function flatResourceToProtoJson(json: unknown, where = ""): JsonObject {
  const flat = expectObject(json, where, "a resource");
  const rawType = flat[PAYLOAD_TYPE];
  if (rawType === undefined || rawType === null) throw invalidArgument(at(where, "payload_type is required"));
  const pt = payloadTypeFrom(rawType, where);
  const out: JsonObject = {};
  const payload: JsonObject = {};
  for (const [key, value] of Object.entries(flat)) {
    if (key === PAYLOAD_TYPE) continue;
    const meta = metadataFieldByName.get(key);
    const target = meta ? out : pt.fieldByName.has(key) ? payload : undefined;
    if (!target)
      throw invalidArgument(at(where, `unknown field "${key}" for payload_type "${pt.name}"`), "UNKNOWN_FIELD");
    // AIP-203: output-only fields sent back by a client are ignored.
    if (meta?.outputOnly) continue;
    if (value === null || value === undefined) continue;
    target[key] = value as JsonValue;
  }
  out[pt.member.name] = payload;
  return out;
}

/**
 * A flat REST update -> the proto3 JSON of ResourceUpdate. The mask lists
 * every key present (null ones too: "in the mask, unset" clears).
 */
export function flatUpdateToProtoJson(json: unknown, where = ""): JsonObject {
  const flat = expectObject(json, where, "an update");
  const rawType = flat[PAYLOAD_TYPE];
  const pt = rawType === undefined || rawType === null ? undefined : payloadTypeFrom(rawType, where);
  const out: JsonObject = {};
  const payload: JsonObject = {};
  const mask: string[] = [];
  for (const [key, value] of Object.entries(flat)) {
    if (key === PAYLOAD_TYPE) continue;
    if (REST_FORBIDDEN_UPDATE_KEYS.has(key)) {
      throw invalidArgument(at(where, `"${key}" is not accepted over REST: the keys present are the mask`));
    }
    // Governed by presence, not by the mask: is_deleted, and the version the
    // client last saw (optimistic concurrency, docs/contract/19-audit-history.md).
    if (key === IS_DELETED || key === EXPECTED_VERSION) {
      if (value !== null && value !== undefined) out[key] = value as JsonValue;
      continue;
    }
    if (updateMetadataFields.has(key)) {
      mask.push(key);
      if (value !== null && value !== undefined) out[key] = value as JsonValue;
      continue;
    }
    if (metadataFieldByName.get(key)?.outputOnly) continue; // AIP-203, as on create
    const known = pt ? pt.fieldByName.has(key) : payloadTypesByField.has(key);
    if (!known) {
      const scope = pt ? `payload_type "${pt.name}"` : "any payload type";
      throw invalidArgument(at(where, `"${key}" is not an updatable field of ${scope}`), "UNKNOWN_FIELD");
    }
    mask.push(key);
    if (value !== null && value !== undefined) payload[key] = value as JsonValue;
  }
  if (pt) {
    // Set even when empty, so the server can compare it with the stored type.
    out[pt.member.name] = payload;
  } else if (Object.keys(payload).length > 0) {
    out["payload_fields"] = payload;
  }
  out["update_mask"] = toJson(FieldMaskSchema, create(FieldMaskSchema, { paths: mask }));
  return out;
}

/** A metadata value in REST JSON: counts (int64) are numbers. */
function metadataValueToRest(info: FieldInfo, value: unknown): JsonValue {
  switch (info.kind) {
    case "int64":
      return Number(value);
    case "double":
      return Number.isFinite(value) ? (value as number) : String(value);
    case "string_list":
      return [...(value as string[])];
    case "double_map":
      return { ...(value as Record<string, number>) };
    default:
      return value as JsonValue;
  }
}

function localValue(message: object, localName: string): unknown {
  return (message as Record<string, unknown>)[localName];
}

function isMetadataSet(message: object, info: FieldInfo): boolean {
  const v = localValue(message, info.desc.localName);
  // Explicit-presence scalars are undefined when unset; everything else is
  // always "set" for the REST writer (implicit scalars, lists, maps).
  return v !== undefined;
}

export interface FlatWriteOptions {
  /** Write `children` (only answers to a request that can exclude them). */
  readonly children: boolean;
  /** Keep only these keys (plus identifier and payload_type). */
  readonly select?: ReadonlySet<string>;
}

/** Payload message -> its proto3 JSON (proto names, int64 as strings). */
function payloadToJson(pt: PayloadType, value: unknown): JsonObject {
  return payloadMessageToJson(pt, value as Message);
}

/** Resource -> the flat REST object. */
export function resourceToFlat(resource: Resource, opts: FlatWriteOptions): JsonObject {
  const out: JsonObject = {};
  for (const info of metadataFields) {
    if (info.name === "children" && !opts.children) continue;
    if (isMetadataSet(resource, info))
      out[info.name] = metadataValueToRest(info, localValue(resource, info.desc.localName));
    else if (info.nullable) out[info.name] = null;
  }
  const { case: member, value } = resource.payload;
  if (member !== undefined) {
    const pt = payloadTypes.get(ResourceSchema.field[member].name);
    if (pt) Object.assign(out, { [PAYLOAD_TYPE]: pt.name }, payloadToJson(pt, value));
  }
  if (opts.select && opts.select.size > 0) {
    const keep = opts.select;
    for (const key of Object.keys(out)) {
      if (key !== "identifier" && key !== PAYLOAD_TYPE && !keep.has(key)) delete out[key];
    }
  }
  return out;
}

/**
 * ResourceUpdate -> the flat REST object (the inverse of
 * flatUpdateToProtoJson): one key per mask path, null when cleared.
 */
export function updateToFlat(update: ResourceUpdate): JsonObject {
  const out: JsonObject = {};
  const { case: member, value } = update.payload;
  const pt = member === undefined ? undefined : payloadTypes.get(ResourceUpdateSchema.field[member].name);
  if (pt) out[PAYLOAD_TYPE] = pt.name;
  if (isDeletedField && update.isDeleted !== undefined) out[IS_DELETED] = update.isDeleted;
  if (update.expectedVersion !== undefined) out[EXPECTED_VERSION] = Number(update.expectedVersion);
  const payloadJson: JsonObject = pt ? payloadToJson(pt, value) : {};
  // protobuf-es hands Struct fields over as plain JSON objects.
  const struct: JsonObject = update.payloadFields ?? {};
  for (const path of update.updateMask?.paths ?? []) {
    const meta = updateMetadataFields.get(path);
    if (meta) {
      out[path] = isMetadataSet(update, meta)
        ? metadataValueToRest(meta, localValue(update, meta.desc.localName))
        : null;
      continue;
    }
    out[path] = payloadJson[path] ?? struct[path] ?? null;
  }
  return out;
}
