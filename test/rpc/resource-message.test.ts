// Resource messages are built from stored rows without create() (see
// toResourceMessage): they must be the very message create() builds, for
// every payload type, with and without each optional field.
import { describe, expect, it } from "vitest";
import { create, fromJson, toBinary, toJson, type JsonObject } from "@bufbuild/protobuf";
import { ResourceSchema, type Resource } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { toResourceMessage } from "../../src/rpc/index.js";
import { payloadTypeOf, payloadTypes } from "../../src/schema/payload-registry.js";
import type { StoredResource } from "../../src/store/index.js";
import { validSamples } from "../schema/samples.js";

/** What toResourceMessage built with create() before (the oracle). */
function viaCreate(row: StoredResource): Resource {
  const type = payloadTypeOf(row.payloadType)!;
  return create(ResourceSchema, {
    identifier: row.identifier,
    ...(row.parentIdentifier !== null ? { parentIdentifier: row.parentIdentifier } : {}),
    ...(row.license !== null ? { license: row.license } : {}),
    accessLevel: row.accessLevel,
    derivedFrom: row.derivedFrom,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
    version: BigInt(row.version),
    children: row.children ?? [],
    payload: {
      case: type.name,
      value: fromJson(type.message, row.payload, { ignoreUnknownFields: true }),
    } as Resource["payload"],
  });
}

function rows(): StoredResource[] {
  const out: StoredResource[] = [];
  let n = 0;
  for (const type of payloadTypes.values()) {
    for (const sample of [{}, ...(validSamples[type.name] ?? [])]) {
      // The stored (canonical) form of the sample.
      const payload = toJson(type.message, fromJson(type.message, sample), { useProtoFieldName: true }) as JsonObject;
      n += 1;
      out.push({
        identifier: `r${n}`,
        payloadType: type.name,
        parentIdentifier: n % 2 === 0 ? null : `p${n}`,
        license: n % 3 === 0 ? null : "CC-BY-4.0",
        accessLevel: ["public", "internal", "restricted"][n % 3]!,
        derivedFrom: n % 4 === 0 ? [] : [`d${n}`, `e${n}`],
        payload,
        createdAt: "2026-01-02T03:04:05.000006Z",
        updatedAt: "2026-01-02T03:04:05.123456Z",
        version: n,
        ...(n % 5 === 0 ? {} : { children: n % 5 === 1 ? [] : [`c${n}`] }),
      });
    }
  }
  return out;
}

describe("Resource messages built from rows", () => {
  it("are the messages create() builds, for every payload type and every optional field set or not", () => {
    const all = rows();
    expect(all.length).toBeGreaterThan(payloadTypes.size * 2);
    for (const row of all) {
      const got = toResourceMessage(row);
      const want = viaCreate(row);
      expect(got, row.identifier).toStrictEqual(want);
      expect(toBinary(ResourceSchema, got)).toEqual(toBinary(ResourceSchema, want));
      expect(toJson(ResourceSchema, got)).toEqual(toJson(ResourceSchema, want));
    }
  });

  it("sets every implicit field the descriptor has", () => {
    const got = toResourceMessage(rows()[1]!);
    for (const key of Object.keys(create(ResourceSchema))) expect(got, key).toHaveProperty(key);
  });
});
