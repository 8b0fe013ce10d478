import { getOption, hasOption } from "@bufbuild/protobuf";
import type { DescMethod, JsonObject } from "@bufbuild/protobuf";
import { Validator } from "@seriousme/openapi-schema-validator";
import { beforeAll, describe, expect, it } from "vitest";
import { http } from "../../gen/google/api/annotations_pb.js";
import { buildOpenApi } from "../../src/schema/openapi.js";
import { strictAjv } from "./ajv.js";
import { revisions } from "./revisions.js";
import { invalidSamples, validSamples } from "./samples.js";

const doc = buildOpenApi(revisions);
const paths = doc["paths"] as Record<string, Record<string, JsonObject>>;

interface Route {
  readonly revision: string;
  readonly method: DescMethod;
  readonly verb: string;
  readonly path: string;
}

/** Every google.api.http rule of every revision, read independently of the generator. */
const routes: Route[] = revisions.flatMap((revision) =>
  revision.services.flatMap((service) =>
    service.methods.flatMap((method): Route[] => {
      if (!hasOption(method, http)) return [];
      const rule = getOption(method, http);
      if (rule.pattern.case === undefined || rule.pattern.case === "custom") return [];
      return [{ revision: revision.name, method, verb: rule.pattern.case, path: rule.pattern.value }];
    }),
  ),
);

const operation = (path: string, verb: string): JsonObject | undefined => paths[path]?.[verb];

describe("buildOpenApi", () => {
  it("is a valid OpenAPI 3.1 document", async () => {
    expect(doc["openapi"]).toBe("3.1.0");
    const result = await new Validator().validate(doc);
    expect(result.errors, JSON.stringify(result.errors, null, 1)?.slice(0, 2000)).toBeUndefined();
    expect(result.valid).toBe(true);
  });

  it("puts every http rule of each revision under its prefix, with its method", () => {
    expect(routes.length).toBeGreaterThan(20);
    for (const route of routes) {
      const op = operation(`/${route.revision}${route.path}`, route.verb);
      expect(op, `${route.verb} /${route.revision}${route.path}`).toBeDefined();
      expect(op?.["summary"]).toBe(`${route.method.parent.typeName}.${route.method.name}`);
    }
  });

  it("serves the union unprefixed, taking the last revision of an operation in both", () => {
    for (const route of routes) {
      const op = operation(route.path, route.verb);
      expect(op, `${route.verb} ${route.path}`).toBeDefined();
      const last = routes.filter((r) => r.path === route.path && r.verb === route.verb).at(-1);
      expect(op?.["summary"]).toBe(`${last?.method.parent.typeName}.${last?.method.name}`);
    }
  });

  it("lists nothing that no rule declares", () => {
    const declared = new Set(routes.flatMap((r) => [`${r.verb} ${r.path}`, `${r.verb} /${r.revision}${r.path}`]));
    for (const [path, item] of Object.entries(paths)) {
      for (const verb of Object.keys(item)) expect(declared.has(`${verb} ${path}`), `${verb} ${path}`).toBe(true);
    }
  });

  it("shows revision-only operations under their own prefix and unprefixed only", () => {
    const only: [string, string, string][] = [
      ["post", "/resources/restore", "v2"],
      ["get", "/children", "v1"],
      ["get", "/artefacts/latest", "v1"],
      ["post", "/admin/materialized-views/refresh", "v1"],
      ["post", "/s3/presign/upload-dir", "v2"],
      ["get", "/s3/list", "v2"],
    ];
    for (const [verb, path, revision] of only) {
      const other = revision === "v1" ? "v2" : "v1";
      expect(operation(`/${revision}${path}`, verb), `${verb} /${revision}${path}`).toBeDefined();
      expect(operation(path, verb), `${verb} ${path}`).toBeDefined();
      expect(operation(`/${other}${path}`, verb), `${verb} /${other}${path}`).toBeUndefined();
    }
  });

  it("gives operations unique ids", () => {
    const ids = Object.values(paths).flatMap((item) => Object.values(item).map((op) => op["operationId"]));
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("binds path parameters and, for GET, every other request field as a typed query parameter", () => {
    const parents = operation("/v2/parents/{identifier}", "get");
    expect(parents?.["parameters"]).toEqual([
      { name: "identifier", in: "path", required: true, schema: { type: "string" } },
      { name: "as_of", in: "query", required: false, schema: { type: "string" } },
    ]);
    const preview = operation("/s3/parquet", "get")?.["parameters"] as JsonObject[];
    expect(preview.map((p) => [p["name"], p["in"], (p["schema"] as JsonObject)["type"]])).toEqual([
      ["path", "query", "string"],
      ["limit", "query", "integer"],
      ["offset", "query", "integer"],
    ]);
    const children = operation("/children", "get")?.["parameters"] as JsonObject[];
    expect(children.find((p) => p["name"] === "with_payloads")?.["schema"]).toEqual({ type: "boolean" });
  });

  it("answers every operation's errors as {code, message} with the Connect code names", () => {
    for (const item of Object.values(paths)) {
      for (const op of Object.values(item)) {
        const responses = op["responses"] as JsonObject;
        for (const status of ["400", "401", "403", "404", "413", "500", "503"]) expect(responses[status]).toBeDefined();
      }
    }
    const error = (doc["components"] as { schemas: Record<string, JsonObject> }).schemas["Error"];
    const codes = (error?.["properties"] as Record<string, JsonObject>)["code"]?.["enum"];
    expect(codes).toEqual(
      expect.arrayContaining(["invalid_argument", "failed_precondition", "not_found", "unavailable"]),
    );
  });

  it("answers QueryParquet as application/octet-stream", () => {
    const ok = (operation("/query/parquet", "post")?.["responses"] as Record<string, JsonObject>)["200"];
    expect(Object.keys(ok?.["content"] as JsonObject)).toEqual(["application/octet-stream"]);
  });

  it("does not expose the field mask of updates", () => {
    expect(JSON.stringify(doc)).not.toContain("update_mask");
    expect(JSON.stringify(doc)).not.toContain("payload_fields");
  });
});

describe("the document's schemas", () => {
  const ajv = strictAjv({ allowUnionTypes: true });
  let check: (name: string, value: unknown) => boolean;

  beforeAll(() => {
    // OpenAPI's discriminator is an annotation for code generators; the
    // oneOf with a const payload_type does the work.
    ajv.addKeyword("discriminator");
    // The component schemas as one 2020-12 schema: $defs instead of components.
    const schemas = (doc["components"] as { schemas: JsonObject }).schemas;
    const defs = JSON.parse(JSON.stringify(schemas).replaceAll('"#/components/schemas/', '"#/$defs/')) as JsonObject;
    ajv.addSchema({ $id: "urn:test:openapi", $defs: defs });
    check = (name, value) => {
      const validate = ajv.getSchema(`urn:test:openapi#/$defs/${name}`);
      if (!validate) throw new Error(`no schema ${name}`);
      return validate(value) as boolean;
    };
  });

  it("compile in ajv's strict 2020-12 mode", () => {
    const schemas = (doc["components"] as { schemas: Record<string, JsonObject> }).schemas;
    for (const name of Object.keys(schemas)) expect(() => check(name, {}), name).not.toThrow();
  });

  const stored = {
    identifier: "f1",
    parent_identifier: null,
    license: null,
    access_level: "internal",
    derived_from: [],
    created_at: "2026-11-21T23:05:01.123456Z",
    updated_at: "2026-11-21T23:05:01.123456Z",
    version: 1,
  };

  it("take a resource as created with each valid payload, and refuse each invalid one", () => {
    for (const [type, samples] of Object.entries(validSamples)) {
      for (const payload of samples) {
        const body = { resources: [{ identifier: "r1", payload_type: type, ...payload }] };
        expect(check("CreateRequest", body), `${type} ${JSON.stringify(payload)}`).toBe(true);
      }
    }
    for (const [type, samples] of Object.entries(invalidSamples)) {
      for (const sample of samples) {
        const body = { resources: [{ identifier: "r1", payload_type: type, ...sample.payload }] };
        expect(check("CreateRequest", body), `${type}: ${sample.why}`).toBe(false);
      }
    }
    expect(check("CreateRequest", { resources: [{ identifier: "r1", name: "x" }] })).toBe(false);
    expect(check("CreateRequest", { resources: [{ identifier: "r1", payload_type: "nope" }] })).toBe(false);
    expect(check("CreateRequest", { resources: [{ payload_type: "study" }] })).toBe(false);
    expect(check("CreateRequest", { resources: [{ identifier: "r1", payload_type: "study", version: 3 }] })).toBe(
      false,
    );
    expect(check("CreateRequest", { resources: [], extra: 1 })).toBe(false);
  });

  it("describe a resource as read: flat, every metadata field present, children optional", () => {
    const file = { ...stored, payload_type: "file", path: "s3://b/k", size_bytes: "12" };
    expect(check("Resource", file)).toBe(true);
    expect(check("Resource", { ...file, children: ["c1"] })).toBe(true);
    const { created_at: _dropped, ...withoutCreatedAt } = file;
    expect(check("Resource", withoutCreatedAt)).toBe(false);
    expect(check("Resource", { ...file, payload_type: "study" })).toBe(false);
    expect(check("Resource", { ...file, file: { path: "s3://b/k" } })).toBe(false);
    expect(check("Resource", { ...file, version: "1" })).toBe(false);
  });

  it("let query results carry only the selected columns", () => {
    const page = {
      results: [{ identifier: "s1", payload_type: "study", modality: "CT" }],
      next_cursor: null,
      limit: null,
    };
    expect(check("QueryResponse", page)).toBe(true);
    expect(check("QueryResponse", { ...page, next_cursor: undefined })).toBe(false);
    expect(check("QueryResponse", { ...page, results: [{ identifier: "s1", payload_type: "study", path: "x" }] })).toBe(
      false,
    );
  });

  it("describe updates as flat changes in which null clears, but not a required payload field", () => {
    const update = (u: JsonObject) => check("UpdateRequest", { updates: { r1: u } });
    expect(update({ license: null, derived_from: ["a"] })).toBe(true);
    expect(update({ is_deleted: true })).toBe(true);
    expect(update({ size_bytes: null, content_type: "text/plain" })).toBe(true);
    expect(update({ payload_type: "file", sha256: null })).toBe(true);
    expect(update({ payload_type: "file", path: null })).toBe(false);
    expect(update({ payload_type: "file", modality: "CT" })).toBe(false);
    expect(update({ sex: "F" })).toBe(false);
    expect(update({ created_at: "2026-11-21T23:05:01.123456Z" })).toBe(false);
  });

  it("write counts as numbers and keep nullable fields present", () => {
    expect(check("CreateResponse", { created: 2 })).toBe(true);
    expect(check("CreateResponse", { created: "2" })).toBe(false);
    const node = {
      identifier: "p1",
      payload_type: "patient",
      parent_identifier: null,
      created_at: "2026-11-21T23:05:01.123456Z",
      child_count: 0,
      descendant_count: 0,
    };
    expect(check("TreeNode", node)).toBe(true);
    expect(check("TreeNode", { ...node, payload: { datasource_id: "ds1" } })).toBe(true);
    const { parent_identifier: _p, ...withoutParent } = node;
    expect(check("TreeNode", withoutParent)).toBe(false);
  });
});
