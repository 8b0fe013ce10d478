// Issue 9, item 4: /query/parquet end to end against the same rows streamed
// straight out of PostgreSQL with pg (target 0.5); the encoding stage against
// DuckDB writing the same rows to SNAPPY parquet (target 1.0); and the
// server's peak RSS (under 512 MB, flat as the rows grow 5x).
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { DuckDBInstance } from "@duckdb/node-api";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { QueryRequestSchema } from "../gen/resourcestore/type/v1/query_pb.js";
import { defaultEncoderWorkers } from "../src/config.js";
import { createEncoderPool, exportColumns, footerRows, parquetExport, type EncoderPool } from "../src/parquet/index.js";
import { pageStatement, planQuery, type QueryRow } from "../src/store/index.js";
import { bulkLoadFiles } from "./support/bulk.js";
import { connect, withDatabase } from "./support/database.js";
import { migrateDatabase } from "./support/load.js";
import { context, fmt, mb, timed, type Result } from "./support/measure.js";
import { startServer } from "./support/server.js";
import type { BenchOptions } from "./options.js";
import { ALL_GRANTS } from "../src/access/index.js";

const MiB = 1024 * 1024;
export const END_TO_END_TARGET = 0.8;
export const ENCODE_TARGET = 1.0;
export const RSS_LIMIT = 512 * MiB;
/** "Flat": the peak may grow by at most this factor when the rows grow 5x. */
export const RSS_GROWTH_TARGET = 1.25;

const EXPORT_QUERY = { payload_type: "file" } as const;
const plan = () => planQuery(fromJson(QueryRequestSchema, EXPORT_QUERY as unknown as JsonObject));

/** POST /query/parquet on a fresh server; bytes, rows/s and the server's peak RSS. */
async function exportThroughService(
  databaseUrl: string,
  expected: number,
): Promise<{ rate: number; bytes: number; peak: number; idle: number }> {
  const server = await startServer({ databaseUrl });
  try {
    const idle = (await server.memory()).rss;
    let bytes = 0;
    const tail: Uint8Array[] = [];
    let tailBytes = 0;
    const { seconds } = await timed(async () => {
      const res = await fetch(`${server.url}/query/parquet`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(EXPORT_QUERY),
      });
      if (res.status !== 200 || !res.body) throw new Error(`/query/parquet answered ${res.status}: ${await res.text()}`);
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        bytes += chunk.length;
        tail.push(chunk);
        tailBytes += chunk.length;
        while (tailBytes - (tail[0]?.length ?? 0) > 8 * MiB) tailBytes -= tail.shift()!.length;
      }
    });
    const rows = footerRows(Buffer.concat(tail));
    if (rows !== expected) throw new Error(`the export holds ${rows} rows, expected ${expected}`);
    const { peak } = await server.memory();
    return { rate: expected / seconds, bytes, peak, idle };
  } finally {
    await server.close();
  }
}

/** The export's statement through a pg cursor, 10,000 rows a fetch, as the engine reads it. */
async function streamThroughPg(url: string, keep: number): Promise<{ rate: number; kept: QueryRow[] }> {
  const st = pageStatement(plan(), { kind: "now" }, ALL_GRANTS, {});
  const client = await connect(url);
  const kept: QueryRow[] = [];
  try {
    let rows = 0;
    const { seconds } = await timed(async () => {
      await client.query("BEGIN");
      await client.query(`DECLARE bench_export NO SCROLL CURSOR FOR ${st.sql}`, st.params);
      for (;;) {
        const res = await client.query<QueryRow>("FETCH 10000 FROM bench_export");
        rows += res.rows.length;
        for (const r of res.rows) if (kept.length < keep) kept.push(r);
        if (res.rows.length < 10000) break;
      }
      await client.query("COMMIT");
    });
    return { rate: rows / seconds, kept };
  } finally {
    await client.end();
  }
}

/** `rows` through parquetExport on `pool`, 10,000 rows a batch as the database hands them over. */
async function encode(pool: EncoderPool, rows: readonly QueryRow[]): Promise<Uint8Array[]> {
  const parts: Uint8Array[] = [];
  const chunks = parquetExport({
    columns: exportColumns(plan()),
    encoders: pool,
    produce: async (write) => {
      for (let at = 0; at < rows.length; at += 10_000) await write(rows.slice(at, at + 10_000));
    },
  });
  for await (const c of chunks) parts.push(c);
  return parts;
}

/**
 * The service's encoding stage alone (Arrow IPC, the encoder pool's workers,
 * stitching, footer check) on rows in memory; then DuckDB on the same rows.
 * The pool's workers are started by a small export first (untimed), as in
 * the service, where the pool lives as long as the process.
 */
async function encodingAgainstDuckDb(rows: QueryRow[]): Promise<{ ours: number; duck: number; oursBytes: number; duckBytes: number; workers: number }> {
  const dir = await mkdtemp(join(tmpdir(), "rs-bench-parquet-"));
  const pool = createEncoderPool(defaultEncoderWorkers());
  try {
    await encode(pool, rows.slice(0, 2 * 50_000));
    let parts: Uint8Array[] = [];
    const { seconds: oursSeconds } = await timed(async () => {
      parts = await encode(pool, rows);
    });
    const ours = join(dir, "ours.parquet");
    const oursFile = Buffer.concat(parts);
    await writeFile(ours, oursFile);
    const instance = await DuckDBInstance.create(":memory:");
    const duck = await instance.connect();
    try {
      // The very rows and types the service wrote, in DuckDB's own memory first (untimed).
      await duck.run(`CREATE TABLE t AS SELECT * FROM read_parquet('${ours}')`);
      const out = join(dir, "duck.parquet");
      const { seconds: duckSeconds } = await timed(() => duck.run(`COPY t TO '${out}' (FORMAT parquet, COMPRESSION snappy)`));
      const n = (await duck.runAndReadAll(`SELECT count(*) FROM read_parquet('${out}')`)).getRows()[0]?.[0];
      if (Number(n) !== rows.length) throw new Error(`DuckDB wrote ${String(n)} rows, expected ${rows.length}`);
      const size = (await duck.runAndReadAll(`SELECT sum(total_compressed_size) FROM parquet_metadata('${out}')`)).getRows()[0]?.[0];
      return { ours: rows.length / oursSeconds, duck: rows.length / duckSeconds, oursBytes: oursFile.length, duckBytes: Number(size), workers: pool.size };
    } finally {
      duck.closeSync();
    }
  } finally {
    await pool.close();
    await rm(dir, { recursive: true, force: true });
  }
}

export async function parquetBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const small = opts.quick ? 100_000 : 1_000_000;
  const large = small * 5;
  const encodeRows = opts.quick ? 50_000 : 500_000;
  context(`parquet: all files (no filter), ${fmt(small)} then ${fmt(large)} rows; encoding stage on ${fmt(encodeRows)} rows`);
  return withDatabase(async (db) => {
    await migrateDatabase(db.url);
    await bulkLoadFiles(db.url, 0, small);
    const svcSmall = await exportThroughService(db.url, small);
    const pgSmall = await streamThroughPg(db.url, encodeRows);
    context(`${fmt(small)} rows: service ${fmt(svcSmall.rate)} rows/s (${mb(svcSmall.bytes)} file), pg cursor ${fmt(pgSmall.rate)} rows/s; server RSS ${mb(svcSmall.idle)} idle, peak ${mb(svcSmall.peak)}`);
    const enc = await encodingAgainstDuckDb(pgSmall.kept);
    pgSmall.kept.length = 0;
    context(`encoding ${fmt(encodeRows)} rows: service ${fmt(enc.ours)} rows/s on ${enc.workers} encoder workers (${mb(enc.oursBytes)}), DuckDB ${fmt(enc.duck)} rows/s (${mb(enc.duckBytes)} of column chunks)`);
    await bulkLoadFiles(db.url, small, large);
    const svcLarge = await exportThroughService(db.url, large);
    context(`${fmt(large)} rows: service ${fmt(svcLarge.rate)} rows/s (${mb(svcLarge.bytes)} file); server RSS ${mb(svcLarge.idle)} idle, peak ${mb(svcLarge.peak)}`);
    return [
      { name: "parquet-end-to-end", ratio: svcSmall.rate / pgSmall.rate, op: ">=", target: END_TO_END_TARGET },
      { name: "parquet-encode-vs-duckdb", ratio: enc.ours / enc.duck, op: ">=", target: ENCODE_TARGET },
      { name: "parquet-peak-rss", ratio: Math.max(svcSmall.peak, svcLarge.peak) / RSS_LIMIT, op: "<=", target: 1 },
      { name: "parquet-rss-growth", ratio: svcLarge.peak / svcSmall.peak, op: "<=", target: RSS_GROWTH_TARGET },
    ];
  });
}
