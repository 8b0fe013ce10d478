// An auditor's pass over the contract (docs/contract/), as a curl user sees it: one real server on
// the embedded parts, every statement checked on the REST surface (and on
// Connect where the contract says the encodings differ). Area tests prove the
// same rules on the services; this file proves they reach the wire.
import { parquetMetadata } from "hyparquet";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";
import { restCaller, type RestAnswer } from "../support/rest.js";

let srv: TestServer;
// Read once after the fixture is written: every row below was stamped at or before it.
let written: string;
const MICROS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/;
const BEFORE_ANY_DATA = "2000-01-01T00:00:00Z";

type Answer = RestAnswer;
const { rest, get, post } = restCaller(() => srv.url);

async function expectError(a: Promise<Answer>, status: number, code: string): Promise<void> {
  const r = await a;
  expect({ status: r.status, code: r.json?.code }).toEqual({ status, code });
  expect(Object.keys(r.json).sort()).toEqual(["code", "message", "reason"]);
}

beforeAll(async () => {
  srv = await startTestServer();
  const r = await post("/resources/create", {
    resources: [
      { identifier: "au-ds", payload_type: "datasource", name: "Audit DS" },
      { identifier: "au-p", payload_type: "patient", parent_identifier: "au-ds", datasource_id: "au-ds" },
      { identifier: "au-s", payload_type: "study", parent_identifier: "au-p", modality: "CT" },
      {
        identifier: "au-f",
        payload_type: "file",
        parent_identifier: "au-s",
        path: "s3://b/k",
        size_bytes: "9007199254740993",
      },
      {
        identifier: "au-a",
        payload_type: "artefact",
        repo: "org/m",
        branch: "main",
        path: "m.onnx",
        status: "succeeded",
        metrics: { dice: 0.5 },
      },
    ],
  });
  expect(r).toEqual({ status: 200, json: { created: 5 } });
  written = (await post("/resources/read", { identifiers: ["au-a"] })).json[0].updated_at;
});
afterAll(async () => {
  await srv?.close();
});

describe("section 1: the shape of a resource in a response", () => {
  const METADATA = [
    "identifier",
    "parent_identifier",
    "license",
    "access_level",
    "derived_from",
    "payload_type",
    "created_at",
    "updated_at",
    "version",
  ];

  it("read, query and artefacts/latest give every metadata field, null when unset, and leave unset payload fields out", async () => {
    const [read] = (await post("/resources/read", { identifiers: ["au-a"] })).json;
    const [queried] = (await post("/query", { identifiers: ["au-a"] })).json.results;
    const latest = (await get("/artefacts/latest?repo=org/m&branch=main&path=m.onnx")).json;
    for (const r of [read, queried, latest]) {
      for (const f of METADATA) expect(r).toHaveProperty(f);
      expect(r.parent_identifier).toBeNull();
      expect(r.license).toBeNull();
      expect(r.derived_from).toEqual([]);
      expect(r.version).toBe(1);
      expect(r).not.toHaveProperty("commit");
      expect(r).not.toHaveProperty("uri");
      expect(r.metrics).toEqual({ dice: 0.5 });
    }
    // children only in /resources/read
    expect(read.children).toEqual([]);
    expect(queried).not.toHaveProperty("children");
    expect(latest).not.toHaveProperty("children");
    expect(Object.keys(read).sort()).toEqual(
      [...METADATA, "children", "repo", "branch", "path", "status", "metrics"].sort(),
    );
  });

  it("writes counts as JSON numbers on REST and int64 as strings over Connect JSON", async () => {
    expect((await post("/query/count", {})).json).toEqual({ count: 5 });
    expect((await post("/resources/delete", { identifiers: [] })).json).toEqual({ deleted: 0 });
    expect((await post("/resources/restore", { identifiers: [] })).json).toEqual({ restored: 0 });
    expect((await post("/resources/update", { updates: {} })).json).toEqual({ updated: 0 });
    const [node] = (await get("/children?parent_identifier=au-ds")).json;
    expect(node).toMatchObject({ identifier: "au-p", child_count: 1, descendant_count: 2 });
    const [stats] = (await get("/datasources/stats")).json;
    expect(stats).toEqual({ datasource_id: "au-ds", patients: 0, studies: 0, resources: 3 });
    const [detailed] = (await get("/datasources/detailed-stats?datasource_id=au-ds")).json;
    expect(detailed).toMatchObject({
      by_payload_type: { patient: 1, study: 1, file: 1 },
      by_access_level: { internal: 3 },
      total_bytes: "9007199254740993",
    });
    // the int64 payload field keeps every digit as a string on REST too
    expect((await post("/resources/read", { identifiers: ["au-f"] })).json[0].size_bytes).toBe("9007199254740993");

    const connect = await fetch(`${srv.url}/resourcestore.v1.QueryService/Count`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(await connect.json()).toEqual({ count: "5" });
  });

  it("refuses response-only and unknown fields of a create only where they are unknown to the type", async () => {
    await expectError(
      post("/resources/create", { resources: [{ identifier: "au-x", payload_type: "series", path: "s3://b/k" }] }),
      400,
      "invalid_argument",
    );
    await expectError(
      post("/resources/create", { resources: [{ identifier: "au-x", payload_type: "series", is_deleted: true }] }),
      400,
      "invalid_argument",
    );
  });
});

describe("timestamps: RFC 3339 UTC with exactly 6 fractional digits on every surface", () => {
  it("in resources, tree nodes, artefacts/latest, detailed stats and the parquet preview of an export", async () => {
    const seen: string[] = [];
    for (const r of (await post("/resources/read", { identifiers: ["au-ds", "au-f"] })).json)
      seen.push(r.created_at, r.updated_at);
    for (const r of (await post("/query", {})).json.results) seen.push(r.created_at, r.updated_at);
    for (const n of (await get("/children")).json) seen.push(n.created_at);
    const latest = (await get("/artefacts/latest?repo=org/m&branch=main&path=m.onnx")).json;
    seen.push(latest.created_at, latest.updated_at);
    for (const d of (await get("/datasources/detailed-stats")).json) seen.push(d.last_updated_at);

    const exported = await post("/query/parquet", { payload_type: "file" });
    expect(exported.status).toBe(200);
    const up = (await post("/s3/presign", { direction: "upload", filename: "export.parquet", group: "audit" })).json;
    expect((await fetch(up.url, { method: "PUT", body: exported.bytes! })).status).toBe(200);
    const preview = (await get(`/s3/parquet?path=${encodeURIComponent(up.path)}`)).json;
    expect(preview.data).toHaveLength(1);
    seen.push(preview.data[0].created_at, preview.data[0].updated_at);

    expect(seen.length).toBeGreaterThan(15);
    for (const t of seen) expect(t).toMatch(MICROS);
  });
});

describe("section 3: as_of on every read", () => {
  const reads: Array<[string, (asOf: string) => Promise<Answer>]> = [
    ["read", (a) => post("/resources/read", { identifiers: ["au-f"], as_of: a })],
    ["children", (a) => get(`/children?parent_identifier=au-ds&as_of=${encodeURIComponent(a)}`)],
    ["roots", (a) => get(`/children?as_of=${encodeURIComponent(a)}`)],
    ["parents", (a) => get(`/parents/au-f?as_of=${encodeURIComponent(a)}`)],
    [
      "artefacts/latest",
      (a) => get(`/artefacts/latest?repo=org/m&branch=main&path=m.onnx&as_of=${encodeURIComponent(a)}`),
    ],
    ["query", (a) => post("/query", { as_of: a })],
    ["count", (a) => post("/query/count", { as_of: a })],
    ["parquet", (a) => post("/query/parquet", { as_of: a })],
  ];

  it.each(reads)("%s refuses an as_of that is not RFC 3339 with Z or an offset", async (_name, read) => {
    for (const bad of ["yesterday", "2026-01-01", "2026-01-01T00:00:00", "2026-01-01 00:00:00Z"]) {
      await expectError(read(bad), 400, "invalid_argument");
    }
  });

  it("before any data: empty results, 404 where one thing is asked for", async () => {
    const at = BEFORE_ANY_DATA;
    expect((await post("/resources/read", { identifiers: ["au-f"], as_of: at })).json).toEqual([]);
    expect((await get(`/children?as_of=${at}`)).json).toEqual([]);
    await expectError(get(`/children?parent_identifier=au-ds&as_of=${at}`), 404, "not_found");
    await expectError(get(`/parents/au-f?as_of=${at}`), 404, "not_found");
    await expectError(get(`/artefacts/latest?repo=org/m&branch=main&path=m.onnx&as_of=${at}`), 404, "not_found");
    expect((await post("/query", { as_of: at })).json).toEqual({ results: [], next_cursor: null, limit: null });
    expect((await post("/query/count", { as_of: at })).json).toEqual({ count: 0 });
    const file = await post("/query/parquet", { as_of: at });
    expect(file.status).toBe(200);
    expect(Number(parquetMetadata(file.bytes!.buffer as ArrayBuffer).num_rows)).toBe(0);
  });

  it("at the instant of the last write (Z or an offset) and in the future, every read sees that state", async () => {
    const offset = new Date(Date.parse(written) + 3_600_000)
      .toISOString()
      .replace(/\.\d+Z$/, `.${written.slice(20, 26)}+01:00`);
    for (const at of [written, offset, "2999-01-01T00:00:00+02:00"]) {
      for (const [name, read] of reads) {
        const r = await read(at);
        expect([name, r.status]).toEqual([name, 200]);
      }
      expect((await post("/query/count", { as_of: at })).json).toEqual({ count: 5 });
      expect((await get(`/parents/au-f?as_of=${encodeURIComponent(at)}`)).json).toEqual(["au-s", "au-p", "au-ds"]);
    }
  });
});

describe("section 0: each revision strictly under its prefix, the union unprefixed", () => {
  const only: Array<["v1" | "v2", "GET" | "POST", string, unknown]> = [
    ["v2", "POST", "/resources/restore", { identifiers: [] }],
    ["v1", "GET", "/children", undefined],
    ["v1", "GET", "/artefacts/latest?repo=org/m&branch=main&path=m.onnx", undefined],
    ["v1", "POST", "/admin/materialized-views/refresh", {}],
    ["v2", "POST", "/s3/presign/upload-dir", { group: "audit", relpaths: ["a.txt"] }],
    ["v2", "GET", "/s3/list?prefix=s3://resources/audit/", undefined],
  ];

  it.each(only)("%s only: %s %s", async (rev, method, path, body) => {
    const other = rev === "v1" ? "v2" : "v1";
    expect((await rest(method, path, body)).status).toBe(200);
    expect((await rest(method, `/${rev}${path}`, body)).status).toBe(200);
    await expectError(rest(method, `/${other}${path}`, body), 404, "not_found");
  });

  it("serves operations of both revisions under both prefixes with the same answer", async () => {
    const a = await post("/v1/resources/read", { identifiers: ["au-p"] });
    const b = await post("/v2/resources/read", { identifiers: ["au-p"] });
    expect(a.status).toBe(200);
    expect(b).toEqual(a);
  });
});

describe("section 4: pages, limits and cursors", () => {
  it("echoes limit, and next_cursor is null exactly when no rows follow", async () => {
    const exact = await post("/query", { limit: 5, select_columns: [] });
    expect(exact.json.results).toHaveLength(5);
    expect(exact.json).toMatchObject({ next_cursor: null, limit: 5 });
    const short = await post("/query", { limit: 4, select_columns: [] });
    expect(short.json.limit).toBe(4);
    expect(typeof short.json.next_cursor).toBe("string");
    const rest_ = await post("/query", { cursor: short.json.next_cursor, select_columns: ["license"] });
    expect(rest_.json).toMatchObject({ next_cursor: null, limit: null });
    expect(rest_.json.results).toHaveLength(1);
  });

  it("takes an as_of equal to the cursor's read point in any offset, refuses another one", async () => {
    const first = (await post("/query", { limit: 2, as_of: written })).json;
    const sameInstant = new Date(Date.parse(written) - 1_800_000)
      .toISOString()
      .replace(/\.\d+Z$/, `.${written.slice(20, 26)}-00:30`);
    for (const at of [written, sameInstant]) {
      expect((await post("/query", { cursor: first.next_cursor, as_of: at })).status).toBe(200);
    }
    await expectError(post("/query", { cursor: first.next_cursor, as_of: BEFORE_ANY_DATA }), 400, "invalid_argument");
  });

  it("count ignores cursor and limit", async () => {
    expect((await post("/query/count", { limit: 0, cursor: "not-a-cursor" })).json).toEqual({ count: 5 });
  });

  it("refuses a limit outside 1..10,000 on query and parquet", async () => {
    for (const limit of [0, 10_001]) {
      await expectError(post("/query", { limit }), 400, "invalid_argument");
      await expectError(post("/query/parquet", { limit }), 400, "invalid_argument");
    }
  });
});

describe("section 5: roots", () => {
  it("are the resources with no parent: a child of a tombstoned parent is not a root", async () => {
    await post("/resources/create", {
      resources: [
        { identifier: "au-root", payload_type: "series" },
        { identifier: "au-leaf", payload_type: "series", parent_identifier: "au-root" },
      ],
    });
    expect((await post("/resources/delete", { identifiers: ["au-root"], cascade: false })).json).toEqual({
      deleted: 1,
    });
    const roots = (await get("/children")).json.map((n: any) => n.identifier);
    expect(roots).not.toContain("au-root");
    expect(roots).not.toContain("au-leaf");
    expect((await get("/parents/au-leaf")).json).toEqual(["au-root"]);
    await post("/resources/delete", { identifiers: ["au-leaf"] });
  });
});
