// An auditor's pass over docs/contract/11-errors.md and the rules it classifies: each
// row of the table from the REST side (invalid_argument for what is malformed
// whatever is stored, failed_precondition for what conflicts with what is
// stored), and the object storage, statistics and registry answers.
import { parquetMetadata } from "hyparquet";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";
import { restCaller, type RestAnswer } from "../support/rest.js";

let srv: TestServer;
let bucket: string;

type Answer = RestAnswer;
const { get, post } = restCaller(() => srv.url);

async function expectError(a: Promise<Answer>, status: number, code: string): Promise<void> {
  const r = await a;
  expect({ status: r.status, code: r.json?.code }).toEqual({ status, code });
}
const invalid = (a: Promise<Answer>) => expectError(a, 400, "invalid_argument");
const conflict = (a: Promise<Answer>) => expectError(a, 400, "failed_precondition");

async function upload(filename: string, body: Uint8Array | string): Promise<string> {
  const up = (await post("/s3/presign", { direction: "upload", filename, group: "audit/err" })).json;
  expect((await fetch(up.url, { method: "PUT", body })).status).toBe(200);
  return up.path;
}

beforeAll(async () => {
  srv = await startTestServer();
  bucket = (await get("/s3/config")).json.s3_bucket;
  const r = await post("/resources/create", {
    resources: [
      { identifier: "e-a", payload_type: "series" },
      { identifier: "e-b", payload_type: "series", parent_identifier: "e-a" },
      { identifier: "e-c", payload_type: "series", parent_identifier: "e-b" },
      { identifier: "e-t", payload_type: "series" },
    ],
  });
  expect(r.json).toEqual({ created: 4 });
  expect((await post("/resources/delete", { identifiers: ["e-t"] })).json).toEqual({ deleted: 1 });
});
afterAll(async () => {
  await srv?.close();
});

async function unchanged(): Promise<void> {
  const read = (await post("/resources/read", { identifiers: ["e-a", "e-b", "e-c", "e-new"], exclude_children: true }))
    .json;
  expect(read.map((r: any) => [r.identifier, r.version, r.parent_identifier])).toEqual([
    ["e-a", 1, null],
    ["e-b", 1, "e-a"],
    ["e-c", 1, "e-b"],
  ]);
}

describe("section 11: malformed whatever is stored is invalid_argument", () => {
  it("bad shapes, types, formats, a field the stored type lacks, a resource as its own parent, too many items", async () => {
    const create = (r: Record<string, unknown>) =>
      post("/resources/create", { resources: [{ identifier: "e-new", payload_type: "series", ...r }] });
    await invalid(create({ identifier: "-starts-with-dash" }));
    await invalid(create({ series_number: "three" }));
    await invalid(create({ access_level: "secret" }));
    await invalid(create({ payload_type: "nope" }));
    await invalid(create({ parent_identifier: "e-new" }));
    await invalid(
      post("/resources/create", {
        resources: [
          { identifier: "e-new", payload_type: "series" },
          { identifier: "e-new", payload_type: "series" },
        ],
      }),
    );
    await invalid(post("/resources/update", { updates: { "e-a": { path: "s3://b/k" } } }));
    await invalid(post("/resources/update", { updates: { "e-a": { parent_identifier: "e-a" } } }));
    await invalid(post("/resources/read", { identifiers: Array.from({ length: 10_001 }, (_, i) => `e-${i}`) }));
    await invalid(post("/resources/delete", { identifiers: ["e-a"], surprise: true }));
    await unchanged();
  });
});

describe("section 11: a conflict with what is stored is failed_precondition", () => {
  it("identifier active, unknown identifier in an update, dangling parent, cycle, payload_type change, change to a tombstone", async () => {
    await conflict(
      post("/resources/create", {
        resources: [
          { identifier: "e-new", payload_type: "series" },
          { identifier: "e-a", payload_type: "series" },
        ],
      }),
    );
    await conflict(
      post("/resources/create", {
        resources: [{ identifier: "e-new", payload_type: "series", parent_identifier: "e-nowhere" }],
      }),
    );
    await conflict(
      post("/resources/create", {
        resources: [{ identifier: "e-new", payload_type: "series", parent_identifier: "e-t" }],
      }),
    );
    await conflict(
      post("/resources/update", { updates: { "e-a": { description: "x" }, "e-nowhere": { description: "x" } } }),
    );
    await conflict(post("/resources/update", { updates: { "e-a": { parent_identifier: "e-c" } } }));
    await conflict(post("/resources/update", { updates: { "e-a": { payload_type: "study" } } }));
    await conflict(post("/resources/update", { updates: { "e-t": { description: "x" } } }));
    await unchanged();
  });

  it("registry: already registered and not registered", async () => {
    const pat = (await post("/patients/register", { datasource_id: "e-ds", external_uid: "u1" })).json.identifier;
    expect(pat).toMatch(/^pat_/);
    await conflict(post("/patients/register", { datasource_id: "e-ds", external_uid: "u1" }));
    await conflict(post("/patients/resolve", { datasource_id: "e-ds", external_uid: "u2" }));
    expect((await post("/patients/resolve", { datasource_id: "e-ds", external_uid: "u1" })).json).toEqual({
      identifier: pat,
    });
    const stu = (await post("/studies/register", { patient_identifier: pat, external_uid: "s1" })).json.identifier;
    expect(stu).toMatch(/^stu_/);
    await conflict(post("/studies/register", { patient_identifier: pat, external_uid: "s1" }));
    await conflict(post("/studies/register", { patient_identifier: "pat_unknown", external_uid: "s1" }));
    await conflict(post("/studies/resolve", { patient_identifier: pat, external_uid: "s2" }));
    await invalid(post("/patients/register", { datasource_id: "e-ds" }));
    await invalid(post("/studies/resolve", { patient_identifier: pat, external_uid: "s1", extra: 1 }));
  });
});

describe("section 10: presigning", () => {
  it("an upload key is {group}/{random id}/{filename}; a download answers only the url", async () => {
    const a = (await post("/s3/presign", { direction: "upload", filename: "scan 1.dcm", group: "g1/sub" })).json;
    const b = (await post("/s3/presign", { direction: "upload", filename: "scan 1.dcm", group: "g1/sub" })).json;
    expect(Object.keys(a).sort()).toEqual(["path", "url"]);
    const shape = new RegExp(`^s3://${bucket}/g1/sub/[^/]+/scan 1\\.dcm$`);
    expect(a.path).toMatch(shape);
    expect(b.path).toMatch(shape);
    expect(a.path).not.toBe(b.path);
    expect(new URL(a.url).searchParams.get("X-Amz-Expires")).toBe("3600");
    const d = (await post("/s3/presign", { direction: "download", path: a.path })).json;
    expect(Object.keys(d)).toEqual(["url"]);
  });

  it("refuses bad groups, filenames and foreign paths with 400, a whole batch for one bad item", async () => {
    for (const group of ["", "/g", "g/", "g//h", "g/./h", "g/../h", "g h", "g\u0001"]) {
      await invalid(post("/s3/presign", { direction: "upload", filename: "f", group }));
    }
    for (const filename of ["", ".", "..", "a/b", "a\\b", "a\nb", "a\u007fb"]) {
      await invalid(post("/s3/presign", { direction: "upload", filename, group: "g" }));
    }
    await invalid(post("/s3/presign", { direction: "download", path: "s3://another-bucket/k" }));
    await invalid(
      post("/s3/presign/batch", {
        direction: "upload",
        items: [
          { filename: "ok", group: "g" },
          { filename: "..", group: "g" },
        ],
      }),
    );
    expect((await post("/s3/presign/batch", { direction: "download", items: [] })).json).toEqual({ urls: [] });
  });

  it("upload-dir: one fresh prefix ending in /, relpaths relative, unique and without dot segments", async () => {
    const r = (await post("/s3/presign/upload-dir", { group: "g", relpaths: ["a/b.txt", "c.txt"] })).json;
    expect(r.root).toMatch(new RegExp(`^s3://${bucket}/g/[^/]+/$`));
    expect(r.items.map((i: any) => i.path)).toEqual([`${r.root}a/b.txt`, `${r.root}c.txt`]);
    for (const relpaths of [["/abs"], ["a", "a"], ["a//b"], ["a/./b"], ["a/../b"], [""]]) {
      await invalid(post("/s3/presign/upload-dir", { group: "g", relpaths }));
    }
  });
});

describe("section 10: /s3/parquet", () => {
  it("defaults to limit 100 and offset 0, counts as numbers; 404 for a missing object, 400 for one that is not parquet", async () => {
    const resources = Array.from({ length: 120 }, (_, i) => ({
      identifier: `pq-${String(i).padStart(3, "0")}`,
      payload_type: "annotation",
      label: "l",
      value: i,
    }));
    expect((await post("/resources/create", { resources })).json).toEqual({ created: 120 });
    const file = await post("/query/parquet", { payload_type: "annotation", sort_by: "identifier", sort_order: "asc" });
    expect(Number(parquetMetadata(file.bytes!.buffer as ArrayBuffer).num_rows)).toBe(120);
    const path = await upload("annotations.parquet", file.bytes!);
    const q = encodeURIComponent(path);

    const page = (await get(`/s3/parquet?path=${q}`)).json;
    expect(Object.keys(page).sort()).toEqual(["columns", "data", "offset", "returned_rows", "schema", "total_rows"]);
    expect(page).toMatchObject({ total_rows: 120, returned_rows: 100, offset: 0 });
    expect(page.data).toHaveLength(100);
    expect(page.data[0]).toMatchObject({ identifier: "pq-000", label: "l", value: 0 });
    expect(page.schema.map((c: any) => c.name)).toEqual(page.columns);
    expect(page.schema.every((c: any) => typeof c.type === "string")).toBe(true);

    const tail = (await get(`/s3/parquet?path=${q}&limit=50&offset=110`)).json;
    expect(tail).toMatchObject({ total_rows: 120, returned_rows: 10, offset: 110 });
    expect(tail.data.map((r: any) => r.identifier)).toEqual(Array.from({ length: 10 }, (_, i) => `pq-${110 + i}`));

    for (const bad of ["limit=0", "limit=10001", "offset=-1"]) await invalid(get(`/s3/parquet?path=${q}&${bad}`));
    await expectError(
      get(`/s3/parquet?path=${encodeURIComponent(`s3://${bucket}/audit/none.parquet`)}`),
      404,
      "not_found",
    );
    await invalid(
      get(`/s3/parquet?path=${encodeURIComponent(await upload("text.parquet", "this is not a parquet file at all"))}`),
    );
  });
});

describe("section 8: statistics", () => {
  it("lists registry-only datasources, leaves out one seen only on a tombstoned patient, sorts by bytes, 404 for unknown", async () => {
    await post("/patients/register", { datasource_id: "Zz-ds", external_uid: "u" });
    await post("/resources/create", {
      resources: [{ identifier: "e-gone", payload_type: "patient", datasource_id: "e-gone-ds" }],
    });
    await post("/resources/delete", { identifiers: ["e-gone"] });
    const ids = (await get("/datasources/stats")).json.map((d: any) => d.datasource_id);
    expect(ids).toEqual(["Zz-ds", "e-ds"]);
    const [only] = (await get("/datasources/detailed-stats?datasource_id=Zz-ds")).json;
    expect(only).toEqual({
      datasource_id: "Zz-ds",
      patients: 1,
      studies: 0,
      resources: 0,
      by_payload_type: {},
      by_access_level: {},
      total_bytes: "0",
      last_updated_at: null,
    });
    await expectError(get("/datasources/detailed-stats?datasource_id=e-gone-ds"), 404, "not_found");
  });
});
