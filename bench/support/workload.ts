// The resources the benchmarks write: batches of series with their files
// (the files name a series of the same batch as parent), the shape of an
// imaging upload. One description, three encodings: the store's NewResource,
// the flat REST body and the protobuf message.
import { create, fromJson, type JsonObject } from "@bufbuild/protobuf";
import { createHash } from "node:crypto";
import { ResourceSchema, type Resource } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { payloadTypeOf } from "../../src/schema/payload-registry.js";
import type { NewResource } from "../../src/store/index.js";

export const SERIES_PER_BATCH = 10;
export const CONTENT_TYPES = [
  "application/dicom",
  "application/dicom",
  "application/dicom",
  "image/png",
  "application/json",
] as const;

/** Resource `i` of the whole run (0-based); batch size fixes which are series. */
export function resourceAt(prefix: string, i: number, batchSize: number): NewResource {
  const batch = Math.floor(i / batchSize);
  const k = i % batchSize;
  const seriesCount = Math.min(SERIES_PER_BATCH, batchSize);
  if (k < seriesCount) {
    return {
      identifier: `${prefix}-s${i}`,
      payloadType: "series",
      license: "CC-BY-4.0",
      accessLevel: "internal",
      payload: {
        modality: "CT",
        series_number: k + 1,
        description: `series ${k} of batch ${batch}`,
        instance_count: batchSize,
      },
    };
  }
  const seriesIndex = batch * batchSize + (k % seriesCount);
  return {
    identifier: `${prefix}-f${i}`,
    payloadType: "file",
    parentIdentifier: `${prefix}-s${seriesIndex}`,
    accessLevel: "internal",
    derivedFrom: [],
    payload: {
      path: `s3://resources/upload/${batch}/${i}.dcm`,
      size_bytes: String(500_000 + (i % 1000) * 17),
      content_type: CONTENT_TYPES[i % CONTENT_TYPES.length]!,
      sha256: createHash("sha256").update(String(i)).digest("hex"),
    },
  };
}

export function batchAt(prefix: string, batch: number, batchSize: number): NewResource[] {
  return Array.from({ length: batchSize }, (_, k) => resourceAt(prefix, batch * batchSize + k, batchSize));
}

/** The flat REST shape (docs/contract/01-resources.md). */
export function toFlat(r: NewResource): Record<string, unknown> {
  return {
    identifier: r.identifier,
    payload_type: r.payloadType,
    ...(typeof r.parentIdentifier === "string" ? { parent_identifier: r.parentIdentifier } : {}),
    ...(typeof r.license === "string" ? { license: r.license } : {}),
    ...(r.accessLevel !== undefined ? { access_level: r.accessLevel } : {}),
    ...(r.derivedFrom !== undefined ? { derived_from: r.derivedFrom } : {}),
    ...r.payload,
  };
}

/** The protobuf message (payload oneof member named after the type). */
export function toMessage(r: NewResource): Resource {
  const type = payloadTypeOf(r.payloadType);
  if (!type) throw new Error(`unknown payload type ${r.payloadType}`);
  return create(ResourceSchema, {
    identifier: r.identifier,
    ...(typeof r.parentIdentifier === "string" ? { parentIdentifier: r.parentIdentifier } : {}),
    ...(typeof r.license === "string" ? { license: r.license } : {}),
    ...(r.accessLevel !== undefined ? { accessLevel: r.accessLevel } : {}),
    derivedFrom: [...(r.derivedFrom ?? [])],
    payload: { case: type.name, value: fromJson(type.message, r.payload as JsonObject) } as Resource["payload"],
  });
}
