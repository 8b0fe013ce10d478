// /query/parquet (docs/benchmarks/parquet.md, "Parquet off the main thread"): end to end against
// the same rows streamed straight out of PostgreSQL with pg (target 0.8); the
// encoding stage, fed by the binary COPY stream the service reads, against
// DuckDB writing the same rows to SNAPPY parquet (target 0.45); and the
// server's peak RSS (under 512 MB, flat as the rows grow 5x).
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { DuckDBInstance } from "@duckdb/node-api";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { QueryRequestSchema } from "../gen/resourcestore/type/v1/query_pb.js";
import { defaultEncoderWorkers } from "../src/config.js";
import {
  createEncoderPool,
  exportColumns,
  exportSelect,
  footerRows,
  parquetExport,
  type EncoderPool,
} from "../src/parquet/index.js";
import { createQueryEngine, openDatabase, pageStatement, planQuery, type QueryRow } from "../src/store/index.js";
import { bulkLoadFiles } from "./support/bulk.js";
import { connect, withDatabase } from "./support/database.js";
import { migrateDatabase } from "./support/load.js";
import { context, fmt, mb, median, timed, type Result } from "./support/measure.js";
import { startServer, type BenchServer } from "./support/server.js";
import type { BenchOptions } from "./options.js";
import { ALL_GRANTS } from "../src/access/index.js";

const MiB = 1024 * 1024;
export const END_TO_END_TARGET = 0.8;
/** Against DuckDB with both cores encoding (it was 1.0, which parquet-wasm cannot reach here: BENCHMARKS.md). */
export const ENCODE_TARGET = 0.45;
export const RSS_LIMIT = 512 * MiB;
/** "Flat": the peak may grow by at most this factor when the rows grow 5x. */
export const RSS_GROWTH_TARGET = 1.25;

const EXPORT_QUERY = { payload_type: "file" } as const;
const plan = () => planQuery(fromJson(QueryRequestSchema, EXPORT_QUERY as unknown as JsonObject));

/** POST /query/parquet on `server`; the bytes, rows/s and the rows the footer holds. */
async function exportOnce(
  server: BenchServer,
  body: object,
): Promise<{ seconds: number; bytes: number; rows: number }> {
  let bytes = 0;
  const tail: Uint8Array[] = [];
  let tailBytes = 0;
  const { seconds } = await timed(async () => {
    const res = await fetch(`${server.url}/query/parquet`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    if (res.status !== 200 || !res.body) throw new Error(`/query/parquet answered ${res.status}: ${await res.text()}`);
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      bytes += chunk.length;
      tail.push(chunk);
      tailBytes += chunk.length;
      while (tailBytes - (tail[0]?.length ?? 0) > 8 * MiB) tailBytes -= tail.shift()!.length;
    }
  });
  return { seconds, bytes, rows: footerRows(Buffer.concat(tail)) };
}

/**
 * A fresh server, one small export first (untimed: the encoder pool starts
 * once per process, as parquet-wasm's start-up would otherwise be half of a
 * quick run), then `rounds` exports of every row, each followed by the same
 * statement through a pg cursor (interleaved); the median of each, and the
 * server's peak RSS over all of it.
 */
async function endToEnd(
  databaseUrl: string,
  registrySecret: string,
  expected: number,
  rounds: number,
): Promise<{ service: number; pg: number; bytes: number; peak: number; idle: number; all: string }> {
  const server = await startServer({ databaseUrl, env: { REGISTRY_SECRET: registrySecret } });
  try {
    const idle = (await server.memory()).rss;
    await exportOnce(server, { ...EXPORT_QUERY, limit: 1 });
    const svc: number[] = [];
    const pgr: number[] = [];
    let bytes = 0;
    for (let r = 0; r < rounds; r++) {
      const out = await exportOnce(server, EXPORT_QUERY);
      if (out.rows !== expected) throw new Error(`the export holds ${out.rows} rows, expected ${expected}`);
      bytes = out.bytes;
      svc.push(expected / out.seconds);
      pgr.push(await streamThroughPg(databaseUrl));
    }
    const { peak } = await server.memory();
    const all = svc.map((x, i) => `${fmt(x)}/${fmt(pgr[i] as number)}`).join(", ");
    return { service: median(svc), pg: median(pgr), bytes, peak, idle, all };
  } finally {
    await server.close();
  }
}

/** The export's statement through a pg cursor, 10,000 rows a fetch, as the engine reads it: rows/s. */
async function streamThroughPg(url: string): Promise<number> {
  const st = pageStatement(plan(), { kind: "now" }, ALL_GRANTS, {});
  const client = await connect(url);
  try {
    let rows = 0;
    const { seconds } = await timed(async () => {
      await client.query("BEGIN");
      await client.query(`DECLARE bench_export NO SCROLL CURSOR FOR ${st.sql}`, st.params);
      for (;;) {
        const res = await client.query<QueryRow>("FETCH 10000 FROM bench_export");
        rows += res.rows.length;
        if (res.rows.length < 10000) break;
      }
      await client.query("COMMIT");
    });
    return rows / seconds;
  } finally {
    await client.end();
  }
}

/** The first `rows` rows of the export's statement as the binary COPY stream the service reads (kept in memory). */
async function copyOfExport(url: string, rows: number): Promise<Uint8Array[]> {
  const db = await openDatabase({ databaseUrl: url, poolSize: 1 });
  try {
    const stream = await createQueryEngine(db).copyRows(
      plan(),
      ALL_GRANTS,
      { limit: rows },
      exportSelect(exportColumns(plan())) as string,
    );
    if (!stream) throw new Error("no COPY on this database");
    const chunks: Uint8Array[] = [];
    for await (const c of stream) chunks.push(c);
    return chunks;
  } finally {
    await db.close();
  }
}

/** The COPY stream through parquetExport on `pool`, as the service runs it (rows cut here, Arrow built in the workers). */
async function encode(pool: EncoderPool, copy: readonly Uint8Array[]): Promise<Uint8Array[]> {
  const parts: Uint8Array[] = [];
  const chunks = parquetExport({
    columns: exportColumns(plan()),
    encoders: pool,
    produce: () => Promise.reject(new Error("the COPY stream was not used")),
    // eslint-disable-next-line @typescript-eslint/require-await
    copy: async () =>
      // eslint-disable-next-line @typescript-eslint/require-await
      (async function* () {
        yield* copy;
      })(),
  });
  for await (const c of chunks) parts.push(c);
  return parts;
}

/**
 * The service's encoding stage alone (the COPY stream cut into row groups,
 * Arrow built and encoded in the encoder pool's workers, stitching, footer
 * check) on a COPY stream held in memory, against DuckDB writing the same
 * rows from its own memory; interleaved rounds, medians. The pool's workers
 * are started and warmed by untimed passes first, as in the service, where
 * the pool lives as long as the process.
 */
async function encodingAgainstDuckDb(
  copy: Uint8Array[],
  rows: number,
  rounds: number,
): Promise<{ ours: number; duck: number; oursBytes: number; duckBytes: number; workers: number; all: string }> {
  const dir = await mkdtemp(join(tmpdir(), "rs-bench-parquet-"));
  const pool = createEncoderPool(defaultEncoderWorkers());
  try {
    // Three untimed passes: the workers' Arrow building is JavaScript, optimised after its first few row groups.
    let parts = await encode(pool, copy);
    for (let w = 0; w < 2; w++) parts = await encode(pool, copy);
    const ours = join(dir, "ours.parquet");
    const oursFile = Buffer.concat(parts);
    if (footerRows(oursFile) !== rows)
      throw new Error(`the encoded file holds ${footerRows(oursFile)} rows, expected ${rows}`);
    await writeFile(ours, oursFile);
    const instance = await DuckDBInstance.create(":memory:");
    const duck = await instance.connect();
    try {
      // The very rows and types the service wrote, in DuckDB's own memory first (untimed).
      await duck.run(`CREATE TABLE t AS SELECT * FROM read_parquet('${ours}')`);
      const out = join(dir, "duck.parquet");
      const o: number[] = [];
      const d: number[] = [];
      for (let r = 0; r < rounds; r++) {
        const { seconds: oursSeconds } = await timed(async () => {
          parts = await encode(pool, copy);
        });
        o.push(rows / oursSeconds);
        const { seconds: duckSeconds } = await timed(() =>
          duck.run(`COPY t TO '${out}' (FORMAT parquet, COMPRESSION snappy)`),
        );
        d.push(rows / duckSeconds);
      }
      const n = (await duck.runAndReadAll(`SELECT count(*) FROM read_parquet('${out}')`)).getRows()[0]?.[0];
      if (Number(n) !== rows) throw new Error(`DuckDB wrote ${String(n)} rows, expected ${rows}`);
      const size = (
        await duck.runAndReadAll(`SELECT sum(total_compressed_size) FROM parquet_metadata('${out}')`)
      ).getRows()[0]?.[0];
      const all = o.map((x, i) => `${fmt(x)}/${fmt(d[i] as number)}`).join(", ");
      return {
        ours: median(o),
        duck: median(d),
        oursBytes: oursFile.length,
        duckBytes: Number(size),
        workers: pool.size,
        all,
      };
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
  // Two row groups in the quick run (one was a single job: one worker, the other core idle), ten in the full one.
  const encodeRows = opts.quick ? 100_000 : 500_000;
  const rounds = opts.quick ? 3 : 2;
  // Both servers of this benchmark open one database: they share its registry key.
  const registrySecret = randomBytes(32).toString("base64url");
  context(
    `parquet: all files (no filter), ${fmt(small)} then ${fmt(large)} rows; encoding stage on ${fmt(encodeRows)} rows; ${rounds} interleaved rounds, medians`,
  );
  return withDatabase(async (db) => {
    await migrateDatabase(db.url);
    await bulkLoadFiles(db.url, 0, small);
    const e2e = await endToEnd(db.url, registrySecret, small, rounds);
    context(
      `${fmt(small)} rows: service ${fmt(e2e.service)} rows/s (${mb(e2e.bytes)} file), pg cursor ${fmt(e2e.pg)} rows/s (rounds service/pg: ${e2e.all}); server RSS ${mb(e2e.idle)} idle, peak ${mb(e2e.peak)}`,
    );
    const copy = await copyOfExport(db.url, encodeRows);
    const enc = await encodingAgainstDuckDb(copy, encodeRows, rounds);
    context(
      `encoding ${fmt(encodeRows)} rows: service ${fmt(enc.ours)} rows/s on ${enc.workers} encoder workers (${mb(enc.oursBytes)}), DuckDB ${fmt(enc.duck)} rows/s (${mb(enc.duckBytes)} of column chunks) (rounds: ${enc.all})`,
    );
    await bulkLoadFiles(db.url, small, large);
    const big = await endToEnd(db.url, registrySecret, large, 1);
    context(
      `${fmt(large)} rows: service ${fmt(big.service)} rows/s (${mb(big.bytes)} file), pg cursor ${fmt(big.pg)} rows/s; server RSS ${mb(big.idle)} idle, peak ${mb(big.peak)}`,
    );
    return [
      { name: "parquet-end-to-end", ratio: e2e.service / e2e.pg, op: ">=", target: END_TO_END_TARGET },
      { name: "parquet-encode-vs-duckdb", ratio: enc.ours / enc.duck, op: ">=", target: ENCODE_TARGET },
      { name: "parquet-peak-rss", ratio: Math.max(e2e.peak, big.peak) / RSS_LIMIT, op: "<=", target: 1 },
      { name: "parquet-rss-growth", ratio: big.peak / e2e.peak, op: "<=", target: RSS_GROWTH_TARGET },
    ];
  });
}
