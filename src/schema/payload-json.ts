// A payload message -> its proto3 JSON (proto field names), as
// `toJson(type.message, msg, { useProtoFieldName: true })` writes it, without
// the reflection: one plan of (name, local name, kind, presence) per payload
// type, read once from the descriptors. A create turns every item's payload
// into JSON; the reflective toJson was the largest part of the handler's own
// time (docs/benchmarks/create.md, "per-item JavaScript"). test/schema/payload-json.test.ts checks
// both give the same JSON.
import { create, fromJson } from "@bufbuild/protobuf";
import type { JsonObject, JsonValue, Message } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import type { FieldKind, PayloadType } from "./payload-registry.js";

interface FieldPlan {
  readonly name: string;
  readonly localName: string;
  readonly kind: FieldKind;
  /** proto3 `optional` (or proto2): set = an own, defined property. */
  readonly explicit: boolean;
}

const plans = new WeakMap<PayloadType, readonly FieldPlan[]>();

function planOf(type: PayloadType): readonly FieldPlan[] {
  let plan = plans.get(type);
  if (plan === undefined) {
    plan = type.fields.map((f) => ({
      name: f.name,
      localName: f.desc.localName,
      kind: f.kind,
      explicit: f.desc.presence !== FeatureSet_FieldPresence.IMPLICIT,
    }));
    plans.set(type, plan);
  }
  return plan;
}

function doubleJson(v: number): JsonValue {
  if (Number.isNaN(v)) return "NaN";
  if (v === Number.POSITIVE_INFINITY) return "Infinity";
  if (v === Number.NEGATIVE_INFINITY) return "-Infinity";
  return v;
}

/** Whether an implicit-presence scalar holds its zero value (and so is not written). */
function isZero(kind: FieldKind, v: unknown): boolean {
  switch (kind) {
    case "string":
      return v === "";
    case "bool":
      return v === false;
    case "double":
      return Object.is(v, 0);
    default:
      // int32 and int64 (number or bigint): 0 and 0n.
      return v == 0; // eslint-disable-line eqeqeq
  }
}

export function payloadMessageToJson(type: PayloadType, message: Message): JsonObject {
  const msg = message as unknown as Record<string, unknown>;
  const out: JsonObject = {};
  for (const f of planOf(type)) {
    const v = msg[f.localName];
    switch (f.kind) {
      case "string_list": {
        const list = v as string[];
        if (list.length > 0) out[f.name] = [...list];
        continue;
      }
      case "double_map": {
        const map = v as Record<string, number>;
        const keys = Object.keys(map);
        if (keys.length === 0) continue;
        const o: JsonObject = {};
        for (const k of keys) o[k] = doubleJson(map[k]!);
        out[f.name] = o;
        continue;
      }
      default:
        break;
    }
    if (f.explicit) {
      if (v === undefined || !Object.prototype.hasOwnProperty.call(msg, f.localName)) continue;
    } else if (isZero(f.kind, v)) {
      continue;
    }
    switch (f.kind) {
      case "int64":
        out[f.name] = (v as bigint | number | string).toString();
        break;
      case "double":
        out[f.name] = doubleJson(v as number);
        break;
      default:
        out[f.name] = v as string | number | boolean;
    }
  }
  return out;
}

/** A value of `kind` as the message holds it, or undefined when the JSON is not in the canonical form toJson writes. */
function fromCanonical(kind: FieldKind, v: unknown): unknown {
  switch (kind) {
    case "string":
      return typeof v === "string" ? v : undefined;
    case "bool":
      return typeof v === "boolean" ? v : undefined;
    case "int32":
      return typeof v === "number" && Number.isInteger(v) && v >= -2147483648 && v <= 2147483647 ? v : undefined;
    case "int64":
      return typeof v === "string" && /^-?(0|[1-9][0-9]{0,18})$/.test(v) ? BigInt(v) : undefined;
    case "double":
      return typeof v === "number" ? v : v === "NaN" || v === "Infinity" || v === "-Infinity" ? Number(v) : undefined;
    case "string_list":
      return Array.isArray(v) && v.every((x) => typeof x === "string") ? [...v] : undefined;
    case "double_map": {
      if (typeof v !== "object" || v === null || Array.isArray(v)) return undefined;
      const out: Record<string, number> = {};
      for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
        if (k === "__proto__") return undefined;
        const n = fromCanonical("double", x);
        if (n === undefined) return undefined;
        out[k] = n as number;
      }
      return out;
    }
  }
}

/**
 * A stored payload (the proto3 JSON payloadMessageToJson wrote) -> its
 * message, as `fromJson(type.message, json, { ignoreUnknownFields: true })`
 * reads it: unknown keys and nulls are skipped. A value not in the canonical
 * form (a payload stored some other way) goes through fromJson itself.
 */
export function payloadJsonToMessage(type: PayloadType, json: JsonObject): Message {
  const msg = create(type.message) as unknown as Record<string, unknown>;
  for (const f of planOf(type)) {
    const v = json[f.name];
    if (v === undefined || v === null) continue;
    const value = fromCanonical(f.kind, v);
    if (value === undefined) return fromJson(type.message, json, { ignoreUnknownFields: true });
    if (value === "" && !f.explicit) continue;
    msg[f.localName] = value;
  }
  return msg as unknown as Message;
}
