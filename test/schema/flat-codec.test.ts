import { describe, expect, it } from "vitest";
import { clone, create, equals, fromJson } from "@bufbuild/protobuf";
import type { JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  flatResourceToProtoJson,
  flatUpdateToProtoJson,
  resourceToFlat,
  updateToFlat,
} from "../../src/schema/flat-codec.js";
import { metadataFields, payloadTypes } from "../../src/schema/payload-registry.js";
import type { FieldInfo, PayloadType } from "../../src/schema/payload-registry.js";
import { ResourceSchema, ResourceUpdateSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import type { Resource } from "../../gen/resourcestore/type/v1/resource_pb.js";

// Beyond 2^53: survives only as a decimal string.
const BIG = 9007199254740993n;

function sampleValue(f: FieldInfo): unknown {
  switch (f.kind) {
    case "string":
      return `${f.name}-value`;
    case "int32":
      return -42;
    case "int64":
      return BIG;
    case "double":
      return 2.5;
    case "bool":
      return true;
    case "string_list":
      return [`${f.name}-a`, `${f.name}-b`];
    case "double_map":
      return { auc: 0.91, loss: -1.25 };
  }
}

function fullPayload(pt: PayloadType): Record<string, unknown> {
  return Object.fromEntries(pt.fields.map((f) => [f.desc.localName, sampleValue(f)]));
}

function fullResource(pt: PayloadType): Resource {
  return create(ResourceSchema, {
    identifier: `${pt.name}-1`,
    parentIdentifier: "parent-1",
    license: "CC-BY-4.0",
    accessLevel: "restricted",
    derivedFrom: ["src-1", "src-2"],
    createdAt: "2026-11-21T23:05:01.123456Z",
    updatedAt: "2026-11-21T23:06:01.000001Z",
    version: 3n,
    children: ["c-1", "c-2"],
    payload: { case: pt.member.localName, value: create(pt.message, fullPayload(pt)) } as Resource["payload"],
  });
}

function expectInvalid(fn: () => unknown, mention: string): void {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    expect((err as ConnectError).rawMessage).toContain(mention);
    return;
  }
  throw new Error("expected invalid_argument");
}

const decodeResource = (flat: unknown) => fromJson(ResourceSchema, flatResourceToProtoJson(flat));
const decodeUpdate = (flat: unknown) => fromJson(ResourceUpdateSchema, flatUpdateToProtoJson(flat));

describe.each([...payloadTypes.values()])("flat resource of payload_type $name", (pt) => {
  it("round-trips every field through REST JSON", () => {
    const original = fullResource(pt);
    const flat = JSON.parse(JSON.stringify(resourceToFlat(original, { children: true }))) as JsonObject;

    expect(flat["payload_type"]).toBe(pt.name);
    expect(flat["version"]).toBe(3);
    expect(flat["children"]).toEqual(["c-1", "c-2"]);
    for (const f of pt.fields) {
      expect(flat, f.name).toHaveProperty(f.name);
      if (f.kind === "int64") expect(flat[f.name]).toBe(BIG.toString());
    }
    // Nothing beyond metadata, payload_type and the payload fields.
    const allowed = new Set([...metadataFields.map((m) => m.name), "payload_type", ...pt.fields.map((f) => f.name)]);
    expect(Object.keys(flat).filter((k) => !allowed.has(k))).toEqual([]);

    // Output-only fields are ignored on the way in (AIP-203).
    const expected = clone(ResourceSchema, original);
    expected.createdAt = "";
    expected.updatedAt = "";
    expected.version = 0n;
    expected.children = [];
    const decoded = decodeResource(flat);
    expect(equals(ResourceSchema, decoded, expected)).toBe(true);
  });

  it("writes null for unset nullable metadata and leaves unset payload fields out", () => {
    const bare = create(ResourceSchema, {
      identifier: "x",
      payload: { case: pt.member.localName, value: create(pt.message) } as Resource["payload"],
    });
    const flat = resourceToFlat(bare, { children: false });
    expect(flat).toMatchObject({
      identifier: "x",
      parent_identifier: null,
      license: null,
      derived_from: [],
      payload_type: pt.name,
    });
    expect(flat).not.toHaveProperty("children");
    for (const f of pt.fields) expect(flat).not.toHaveProperty(f.name);
  });

  it("round-trips an update naming its payload_type, with the mask from the keys", () => {
    const flat: JsonObject = { payload_type: pt.name, license: null, derived_from: ["a"], is_deleted: false };
    for (const f of pt.fields)
      flat[f.name] = JSON.parse(
        JSON.stringify(sampleValue(f), (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v)),
      );
    const decoded = decodeUpdate(flat);
    expect(decoded.updateMask?.paths).toEqual(["license", "derived_from", ...pt.fields.map((f) => f.name)]);
    expect(decoded.payload.case).toBe(pt.member.localName);
    expect(decoded.isDeleted).toBe(false);
    expect(decoded.license).toBeUndefined();
    expect(updateToFlat(decoded)).toEqual(flat);
  });
});

describe("flat resource decoding", () => {
  it("reads int64 payload fields from numbers and strings alike", () => {
    const a = decodeResource({ identifier: "f", payload_type: "file", path: "s3://b/k", size_bytes: 12 });
    const b = decodeResource({ identifier: "f", payload_type: "file", path: "s3://b/k", size_bytes: "12" });
    expect(a.payload.case === "file" && a.payload.value.sizeBytes).toBe(12n);
    expect(equals(ResourceSchema, a, b)).toBe(true);
  });

  it("takes null as absent", () => {
    const r = decodeResource({
      identifier: "p",
      payload_type: "patient",
      parent_identifier: null,
      license: null,
      sex: null,
      datasource_id: "ds",
    });
    expect(r.parentIdentifier).toBeUndefined();
    expect(r.license).toBeUndefined();
    expect(r.payload.case === "patient" && r.payload.value.sex).toBeUndefined();
  });

  it("rejects a missing, non-string or unknown payload_type", () => {
    expectInvalid(() => flatResourceToProtoJson({ identifier: "a" }), "payload_type");
    expectInvalid(() => flatResourceToProtoJson({ identifier: "a", payload_type: 3 }), "payload_type");
    expectInvalid(() => flatResourceToProtoJson({ identifier: "a", payload_type: "spaceship" }), "spaceship");
  });

  it("rejects a key that is neither metadata nor a field of the payload type, naming it", () => {
    // `modality` is a study field, not a file field.
    expectInvalid(
      () => flatResourceToProtoJson({ identifier: "a", payload_type: "file", path: "s3://b/k", modality: "CT" }),
      '"modality"',
    );
    // camelCase is not a REST name.
    expectInvalid(
      () => flatResourceToProtoJson({ identifier: "a", payload_type: "file", sizeBytes: 1 }),
      '"sizeBytes"',
    );
  });

  it("rejects a resource that is not an object", () => {
    expectInvalid(() => flatResourceToProtoJson([], "resources[0]"), "resources[0]");
    expectInvalid(() => flatResourceToProtoJson("x"), "object");
  });

  it("leaves value type checks to the strict proto3 JSON reader", () => {
    expect(() => decodeResource({ identifier: "a", payload_type: "patient", birth_year: "nineteen" })).toThrow(
      /birth_year/,
    );
  });
});

describe("flat update decoding", () => {
  it("builds the example of the contract", () => {
    const u = decodeUpdate({ license: null, modality: "MR", payload_type: "study", is_deleted: false });
    expect(u.updateMask?.paths).toEqual(["license", "modality"]);
    expect(u.license).toBeUndefined();
    expect(u.isDeleted).toBe(false);
    expect(u.payload.case).toBe("study");
    expect(u.payload.case === "study" && u.payload.value.modality).toBe("MR");
    expect(u.payloadFields).toBeUndefined();
  });

  it("puts payload keys into payload_fields when payload_type is not named, nulls only into the mask", () => {
    const u = decodeUpdate({ size_bytes: "5", modality: "CT", description: null, access_level: "public" });
    expect(u.payload.case).toBeUndefined();
    expect(u.payloadFields).toEqual({ size_bytes: "5", modality: "CT" });
    expect(u.updateMask?.paths).toEqual(["size_bytes", "modality", "description", "access_level"]);
    expect(u.accessLevel).toBe("public");
    expect(updateToFlat(u)).toEqual({ size_bytes: "5", modality: "CT", description: null, access_level: "public" });
  });

  it("sets an empty payload member for a bare payload_type, with an empty mask", () => {
    const u = decodeUpdate({ payload_type: "series" });
    expect(u.payload.case).toBe("series");
    expect(u.updateMask?.paths).toEqual([]);
  });

  it("keeps is_deleted out of the mask", () => {
    const u = decodeUpdate({ is_deleted: true });
    expect(u.isDeleted).toBe(true);
    expect(u.updateMask?.paths).toEqual([]);
  });

  it("ignores output-only keys sent back in an update but refuses to change the identifier", () => {
    const u = decodeUpdate({ version: 3, created_at: "2026-01-01T00:00:00.000000Z", children: [], license: "MIT" });
    expect(u.updateMask?.paths).toEqual(["license"]);
    expectInvalid(() => flatUpdateToProtoJson({ identifier: "other" }), '"identifier"');
  });

  it("rejects keys of no payload type, of another payload type, and the Connect-only keys", () => {
    expectInvalid(() => flatUpdateToProtoJson({ warp_factor: 9 }), '"warp_factor"');
    expectInvalid(() => flatUpdateToProtoJson({ payload_type: "study", size_bytes: 3 }), '"size_bytes"');
    expectInvalid(() => flatUpdateToProtoJson({ update_mask: "license" }), '"update_mask"');
    expectInvalid(() => flatUpdateToProtoJson({ payload_fields: {} }), '"payload_fields"');
    expectInvalid(() => flatUpdateToProtoJson({ payload_type: "nope" }), '"nope"');
  });
});

describe("flat resource encoding options", () => {
  const pt = payloadTypes.get("study");
  if (!pt) throw new Error("study payload type missing");

  it("keeps only the selected columns plus identifier and payload_type", () => {
    const flat = resourceToFlat(fullResource(pt), { children: false, select: new Set(["modality", "license"]) });
    expect(Object.keys(flat).sort()).toEqual(["identifier", "license", "modality", "payload_type"]);
  });
});
