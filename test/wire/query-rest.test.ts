// docs/contract/04-query.md over REST: filters, cursors and the echoed limit as a
// curl user sees them, counts as numbers, and /query/parquet streamed as one
// file that a /query cursor can continue.
import { parquetMetadata, parquetReadObjects } from "hyparquet";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";
import { restCaller } from "../support/rest.js";

let srv: TestServer;
const N = 25;
beforeAll(async () => {
  srv = await startTestServer();
  const resources = [
    { identifier: "q-ds", payload_type: "datasource", name: "DS" },
    ...Array.from({ length: N }, (_, i) => ({
      identifier: `q-f${String(i).padStart(2, "0")}`,
      parent_identifier: "q-ds",
      payload_type: "file",
      path: `s3://bucket/f${i}`,
      size_bytes: String(1000 + i),
    })),
  ];
  const r = await post("/resources/create", { resources });
  expect(r.json).toEqual({ created: N + 1 });
});
afterAll(async () => {
  await srv?.close();
});

const { post } = restCaller(() => srv.url);

const big = {
  payload_type: "file",
  filters: [{ field: "size_bytes", op: "gte", value: 1010 }],
  sort_by: "identifier",
  sort_order: "ASC",
};

describe("query over REST", () => {
  it("pages with a cursor, each row once, limit echoed, next_cursor null at the end", async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const r: { status: number; json: any } = await post("/query", {
        ...big,
        limit: 4,
        ...(cursor ? { cursor } : {}),
      });
      expect(r.status).toBe(200);
      expect(r.json.limit).toBe(4);
      expect(Object.keys(r.json).sort()).toEqual(["limit", "next_cursor", "results"]);
      seen.push(...r.json.results.map((x: any) => x.identifier));
      cursor = r.json.next_cursor;
      pages++;
    } while (cursor !== null);
    expect(seen).toEqual(Array.from({ length: 15 }, (_, i) => `q-f${String(i + 10).padStart(2, "0")}`));
    expect(pages).toBe(4);
  });

  it("answers flat results, select_columns, a null limit when none was given, and counts as numbers", async () => {
    const r = await post("/query", { ...big, select_columns: ["size_bytes"] });
    expect(r.json.limit).toBeNull();
    expect(r.json.next_cursor).toBeNull();
    expect(r.json.results[0]).toEqual({ identifier: "q-f10", payload_type: "file", size_bytes: "1010" });
    const c = await post("/query/count", { ...big, limit: 1, cursor: "ignored" });
    expect(c).toEqual({ status: 200, json: { count: 15 } });
    const kids = await post("/query/count", { parent_identifier: "q-ds" });
    expect(kids.json).toEqual({ count: N });
  });

  it("refuses unknown fields, bad ops, bad limits and foreign cursors with 400", async () => {
    const first = await post("/query", { ...big, limit: 2 });
    const bad = [
      { payload_type: "file", filters: [{ field: "nope", op: "eq", value: 1 }] },
      { payload_type: "file", filters: [{ field: "size_bytes", op: "starts_with", value: "1" }] },
      { payload_type: "file", filters: [{ field: "size_bytes", op: "eq", value: "lots" }] },
      { limit: 0 },
      { limit: 10001 },
      { payload_type: "study", cursor: first.json.next_cursor },
      { ...big, cursor: first.json.next_cursor.slice(0, -2) + "xx" },
    ];
    for (const body of bad) {
      const r = await post("/query", body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.json.code).toBe("invalid_argument");
    }
  });

  it("streams /query/parquet as one parquet file, and continues a /query cursor", async () => {
    const res = await fetch(`${srv.url}/query/parquet`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(big),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/octet-stream");
    const buf = await res.arrayBuffer();
    expect(Number(parquetMetadata(buf).num_rows)).toBe(15);
    const rows = await parquetReadObjects({ file: buf });
    expect(rows[0]).toMatchObject({ identifier: "q-f10", payload_type: "file", size_bytes: 1010n });

    const first = await post("/query", { ...big, limit: 5 });
    const rest = await fetch(`${srv.url}/query/parquet`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...big, cursor: first.json.next_cursor }),
    });
    const restRows = await parquetReadObjects({ file: await rest.arrayBuffer() });
    expect(restRows.map((r) => r.identifier)).toEqual(
      Array.from({ length: 10 }, (_, i) => `q-f${String(i + 15).padStart(2, "0")}`),
    );
  });
});
