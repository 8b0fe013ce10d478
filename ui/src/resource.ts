// A resource as the page shows it: flat, as over REST (metadata, then the
// payload fields beside it), from the Connect message.
import { toJson, type JsonObject } from "@bufbuild/protobuf";
import { ResourceSchema, type Resource } from "../../gen/resourcestore/type/v1/resource_pb.js";

export const METADATA = [
  "identifier",
  "payload_type",
  "parent_identifier",
  "license",
  "access_level",
  "derived_from",
  "created_at",
  "updated_at",
  "version",
] as const;

export interface FlatResource {
  readonly meta: Record<string, unknown>;
  readonly payload: JsonObject;
  readonly children: readonly string[];
}

export function flatten(r: Resource): FlatResource {
  const json = toJson(ResourceSchema, r, { useProtoFieldName: true }) as JsonObject;
  const type = r.payload.case;
  const payload = type === undefined ? {} : ((json[type] ?? {}) as JsonObject);
  return {
    meta: {
      identifier: r.identifier,
      payload_type: type ?? null,
      parent_identifier: r.parentIdentifier ?? null,
      license: r.license ?? null,
      access_level: r.accessLevel ?? null,
      derived_from: r.derivedFrom,
      created_at: r.createdAt,
      updated_at: r.updatedAt,
      version: r.version.toString(),
    },
    payload,
    children: r.children,
  };
}

/** `k: v` pairs of a payload, cut to a line. */
export function preview(payload: JsonObject | undefined, max = 80): string {
  if (payload === undefined) return "";
  const text = Object.entries(payload)
    .map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join(", ");
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
