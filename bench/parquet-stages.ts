// Where the parquet encoding stage's time goes (docs/benchmarks/parquet.md,
// "Where the encoding stage's time goes"): the export's
// binary COPY stream read from PostgreSQL; this thread's share (cutting it
// into row groups); the workers' share (COPY tuples -> Arrow IPC, then one
// row group encoded in one worker); the whole stage with 1 and 2 workers;
// DuckDB's COPY of the same rows for scale; and, for comparison, the row
// path's Arrow building on this thread (rowsToIpc, what PGlite still uses).
// Context only, no target.
// Usage: npx tsx bench/parquet-stages.ts [rows]   (on TEST_DATABASE_URL's server)
import { fromJson } from "@bufbuild/protobuf";
import { DuckDBInstance } from "@duckdb/node-api";
import * as arrow from "apache-arrow";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { QueryRequestSchema } from "../gen/resourcestore/type/v1/query_pb.js";
import {
  arrowSchema,
  copyTuplesToIpc,
  CopyRowSplitter,
  createEncoderPool,
  exportColumns,
  exportSelect,
  parquetExport,
  rowsToIpc,
  type EncoderPool,
  type WireColumn,
} from "../src/parquet/index.js";
import { createQueryEngine, openDatabase, pageStatement, planQuery, type QueryRow } from "../src/store/index.js";
import { bulkLoadFiles } from "./support/bulk.js";
import { connect, withDatabase } from "./support/database.js";
import { migrateDatabase } from "./support/load.js";
import { ALL_GRANTS } from "../src/access/index.js";

const N = Number(process.argv[2] ?? 200_000);
const plan = () => planQuery(fromJson(QueryRequestSchema, { payload_type: "file" }));
const ms = (t0: number) => (performance.now() - t0).toFixed(0);
const rate = (rows: number, t0: number) => ((rows / (performance.now() - t0)) * 1000).toFixed(0);
const cols = exportColumns(plan());
const wire: WireColumn[] = cols.map((c) => ({ name: c.name, kind: c.kind, wire: c.wire ?? "text" }));

async function run(pool: EncoderPool, copy: readonly Uint8Array[], rg: number): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  for await (const c of parquetExport({
    columns: cols,
    encoders: pool,
    rowGroupRows: rg,
    produce: () => Promise.reject(new Error("unused")),
    // eslint-disable-next-line @typescript-eslint/require-await
    copy: async () =>
      // eslint-disable-next-line @typescript-eslint/require-await
      (async function* () {
        yield* copy;
      })(),
  }))
    parts.push(c);
  return Buffer.concat(parts);
}

await withDatabase(async (db) => {
  await migrateDatabase(db.url);
  await bulkLoadFiles(db.url, 0, N);
  const store = await openDatabase({ databaseUrl: db.url, poolSize: 1 });
  let copy: Uint8Array[] = [];
  let t0 = 0;
  for (let k = 0; k < 3; k++) {
    copy = [];
    t0 = performance.now();
    const stream = await createQueryEngine(store).copyRows(plan(), ALL_GRANTS, {}, exportSelect(cols) as string);
    for await (const c of stream ?? []) copy.push(c);
    console.log(
      `COPY (FORMAT binary) of ${N} rows read: ${ms(t0)} ms, ${rate(N, t0)} rows/s, ${(copy.reduce((n, c) => n + c.length, 0) / 1e6).toFixed(1)} MB`,
    );
  }
  await store.close();
  const st = pageStatement(plan(), { kind: "now" }, ALL_GRANTS, {});
  const client = await connect(db.url);
  t0 = performance.now();
  const rows = (await client.query<QueryRow>(st.sql, st.params)).rows;
  console.log(`the same rows as pg row objects (one query): ${ms(t0)} ms, ${rate(N, t0)} rows/s`);
  await client.end();

  const groups: { data: Uint8Array; rows: number }[] = [];
  for (let k = 0; k < 3; k++) {
    groups.length = 0;
    t0 = performance.now();
    const sp = new CopyRowSplitter(cols.length, 50_000);
    for (const c of copy) groups.push(...sp.push(c));
    const last = sp.end();
    if (last) groups.push(last);
    console.log(`main thread: cut into row groups ${ms(t0)} ms, ${rate(N, t0)} rows/s`);
  }
  const g = groups[0] as { data: Uint8Array; rows: number };
  for (let k = 0; k < 3; k++) {
    t0 = performance.now();
    copyTuplesToIpc(arrow, g.data, g.rows, wire);
    console.log(`worker's Arrow building (here): ${g.rows} rows COPY -> IPC ${ms(t0)} ms, ${rate(g.rows, t0)} rows/s`);
  }
  const schema = arrowSchema(cols);
  for (let k = 0; k < 2; k++) {
    t0 = performance.now();
    for (let a = 0; a < rows.length; a += 10_000) rowsToIpc(schema, cols, rows.slice(a, a + 10_000));
    console.log(`row path for comparison: rowsToIpc ${N} rows ${ms(t0)} ms, ${rate(N, t0)} rows/s`);
  }

  const dir = await mkdtemp(join(tmpdir(), "rs-prof-"));
  let file: Uint8Array = new Uint8Array();
  const dictionaryColumns = cols.filter((c) => c.lowCardinality).map((c) => c.name);
  for (const workers of [1, 2]) {
    const pool = createEncoderPool(workers);
    await run(pool, copy, 50_000);
    for (let k = 0; k < 2; k++) {
      const data = g.data.slice();
      t0 = performance.now();
      await pool.encode({
        options: { rowGroupRows: 50_000, dataPageBytes: 65536, dictionaryColumns },
        copy: { data, rows: g.rows, columns: wire },
      });
      console.log(`workers ${workers}: one ${g.rows}-row group in one worker (COPY in, parquet out) ${ms(t0)} ms`);
    }
    for (const rg of [50_000, 50_000, 25_000]) {
      t0 = performance.now();
      file = await run(pool, copy, rg);
      console.log(`workers ${workers} rowGroup ${rg}: ${rate(N, t0)} rows/s (${(file.length / 1e6).toFixed(1)} MB)`);
    }
    await pool.close();
  }
  const path = join(dir, "ours.parquet");
  await writeFile(path, file);
  const inst = await DuckDBInstance.create(":memory:");
  const duck = await inst.connect();
  await duck.run(`CREATE TABLE t AS SELECT * FROM read_parquet('${path}')`);
  for (let k = 0; k < 3; k++) {
    t0 = performance.now();
    await duck.run(`COPY t TO '${join(dir, "d.parquet")}' (FORMAT parquet, COMPRESSION snappy)`);
    console.log(`duckdb: ${rate(N, t0)} rows/s`);
  }
  duck.closeSync();
  await rm(dir, { recursive: true, force: true });
});
