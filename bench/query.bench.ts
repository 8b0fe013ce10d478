// A query page (limit 100, a payload-field filter, sorted by
// created_at) on 1,000,000 resources, and the same page at a deep cursor
// (row 500,000). Target: the deep page within 1.5 times the first.
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { QueryRequestSchema } from "../gen/resourcestore/type/v1/query_pb.js";
import { pageStatement, planQuery } from "../src/store/index.js";
import { bulkLoadFiles } from "./support/bulk.js";
import { connect, withDatabase } from "./support/database.js";
import { migrateDatabase } from "./support/load.js";
import { context, fmt, median, percentile, type Result } from "./support/measure.js";
import { startServer } from "./support/server.js";
import type { BenchOptions } from "./options.js";
import { ALL_GRANTS } from "../src/access/index.js";

export const DEEP_TARGET = 1.5;

/** The query of the benchmark: 3 in 5 files match. */
export const PAGE_QUERY = {
  payload_type: "file",
  filters: [{ field: "content_type", op: "eq", value: "application/dicom" }],
  sort_by: "created_at",
  sort_order: "desc",
} as const;

export async function postJson(
  url: string,
  body: unknown,
): Promise<{ results: unknown[]; next_cursor: string | null }> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${url} answered ${res.status}: ${text.slice(0, 300)}`);
  return JSON.parse(text) as { results: unknown[]; next_cursor: string | null };
}

/** The cursor after row `row` of the query, reached with pages of 10,000 identifiers. */
export async function cursorAt(baseUrl: string, query: object, row: number): Promise<string> {
  let cursor: string | null = null;
  for (let seen = 0; seen < row;) {
    const limit = Math.min(10_000, row - seen);
    const page = await postJson(`${baseUrl}/query`, {
      ...query,
      select_columns: ["identifier"],
      limit,
      ...(cursor ? { cursor } : {}),
    });
    seen += page.results.length;
    cursor = page.next_cursor;
    if (cursor === null) throw new Error(`the query ended after ${seen} rows, before row ${row}`);
  }
  return cursor!;
}

export async function measurePages(
  baseUrl: string,
  variants: Record<string, () => Promise<number>>,
  runs: number,
): Promise<Record<string, number[]>> {
  const times: Record<string, number[]> = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
  const warmup = Math.max(2, Math.ceil(runs / 10));
  for (let i = 0; i < warmup + runs; i++) {
    for (const [name, run] of Object.entries(variants)) {
      const start = process.hrtime.bigint();
      const n = await run();
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      if (n !== 100) throw new Error(`${name} returned ${n} rows at ${baseUrl}`);
      if (i >= warmup) times[name]!.push(ms);
    }
  }
  return times;
}

export async function queryBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const total = opts.quick ? 200_000 : 1_000_000;
  const deep = total / 2;
  const runs = opts.quick ? 30 : 60;
  context(
    `query page: ${fmt(total)} files (bulk SQL in the store's shape), filter content_type eq (3 in 5 match), sort created_at desc, limit 100; deep cursor at row ${fmt(deep)}`,
  );
  return withDatabase(async (db) => {
    await migrateDatabase(db.url);
    const t = Date.now();
    await bulkLoadFiles(db.url, 0, total);
    context(`loaded in ${((Date.now() - t) / 1000).toFixed(0)} s`);
    const server = await startServer({ databaseUrl: db.url });
    const pgClient = await connect(db.url);
    try {
      const first = { ...PAGE_QUERY, limit: 100 };
      const cursor = await cursorAt(server.url, PAGE_QUERY, deep);
      // The first page's statement as the engine compiles it (limit + 1 tells whether more follow).
      const st = pageStatement(
        planQuery(fromJson(QueryRequestSchema, first as unknown as JsonObject)),
        { kind: "now" },
        ALL_GRANTS,
        { limit: 101 },
      );
      const times = await measurePages(
        server.url,
        {
          "first page": async () => (await postJson(`${server.url}/query`, first)).results.length,
          "deep page": async () => (await postJson(`${server.url}/query`, { ...first, cursor })).results.length,
          "first page through pg": async () => (await pgClient.query(st.sql, st.params)).rows.length - 1,
        },
        runs,
      );
      for (const [name, xs] of Object.entries(times))
        context(`${name}: median ${fmt(median(xs), 2)} ms, p95 ${fmt(percentile(xs, 95), 2)} ms`);
      return [
        {
          name: "query-deep-page",
          ratio: median(times["deep page"]!) / median(times["first page"]!),
          op: "<=",
          target: DEEP_TARGET,
        },
      ];
    } finally {
      await pgClient.end();
      await server.close();
    }
  });
}
