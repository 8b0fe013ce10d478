// Where the parquet encoding stage's time goes (BENCHMARKS.md): rows ->
// Arrow IPC on the main thread, one row group encoded in one worker, the
// whole stage with 1 and 2 workers and two row-group sizes; DuckDB's COPY of
// the same rows for scale. Context only, no target.
// Usage: npx tsx bench/parquet-stages.ts [rows]   (on TEST_DATABASE_URL's server; hold the benchmark lock)
import { fromJson } from "@bufbuild/protobuf";
import { DuckDBInstance } from "@duckdb/node-api";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { QueryRequestSchema } from "../gen/resourcestore/type/v1/query_pb.js";
import { arrowSchema, createEncoderPool, exportColumns, parquetExport, rowsToIpc, type EncoderPool } from "../src/parquet/index.js";
import { pageStatement, planQuery, type QueryRow } from "../src/store/index.js";
import { bulkLoadFiles } from "./support/bulk.js";
import { connect, withDatabase } from "./support/database.js";
import { migrateDatabase } from "./support/load.js";
import { ALL_GRANTS } from "../src/access/index.js";

const N = Number(process.argv[2] ?? 200_000);
const plan = () => planQuery(fromJson(QueryRequestSchema, { payload_type: "file" }));
const ms = (t0: number) => (performance.now() - t0).toFixed(0);
async function run(pool: EncoderPool, rows: QueryRow[], rg: number): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  for await (const c of parquetExport({ columns: exportColumns(plan()), encoders: pool, rowGroupRows: rg, produce: async (w) => { for (let a = 0; a < rows.length; a += 10_000) await w(rows.slice(a, a + 10_000)); } })) parts.push(c);
  return Buffer.concat(parts);
}
await withDatabase(async (db) => {
  await migrateDatabase(db.url);
  await bulkLoadFiles(db.url, 0, N);
  const st = pageStatement(plan(), { kind: "now" }, ALL_GRANTS, {});
  const client = await connect(db.url);
  const rows = (await client.query<QueryRow>(st.sql, st.params)).rows;
  await client.end();
  const cols = exportColumns(plan());
  const schema = arrowSchema(cols);
  let t0: number;
  for (let k = 0; k < 3; k++) {
    t0 = performance.now();
    for (let a = 0; a < rows.length; a += 10_000) rowsToIpc(schema, cols, rows.slice(a, a + 10_000));
    console.log(`rowsToIpc ${N} rows: ${ms(t0)} ms`);
  }
  const dir = await mkdtemp(join(tmpdir(), "rs-prof-"));
  let file: Uint8Array = new Uint8Array();
  for (const workers of [1, 2]) {
    const pool = createEncoderPool(workers);
    await run(pool, rows.slice(0, 100_000), 50_000);
    // one row group alone in one worker
    const ipcs: Uint8Array[] = [];
    for (let a = 0; a < 50_000; a += 10_000) ipcs.push(rowsToIpc(schema, cols, rows.slice(a, a + 10_000)));
    t0 = performance.now();
    await pool.encode({ options: { rowGroupRows: 50_000, dataPageBytes: 65536, dictionaryColumns: cols.filter((c) => c.lowCardinality).map((c) => c.name) }, batches: ipcs });
    console.log(`workers ${workers}: one 50,000-row group in one worker ${ms(t0)} ms`);
    for (const rg of [50_000, 50_000, 25_000]) {
      t0 = performance.now();
      file = await run(pool, rows, rg);
      const s = (performance.now() - t0) / 1000;
      console.log(`workers ${workers} rowGroup ${rg}: ${(N / s).toFixed(0)} rows/s (${(file.length / 1e6).toFixed(1)} MB)`);
    }
    await pool.close();
  }
  const path = join(dir, "ours.parquet");
  await writeFile(path, file);
  const inst = await DuckDBInstance.create(":memory:");
  const duck = await inst.connect();
  await duck.run(`CREATE TABLE t AS SELECT * FROM read_parquet('${path}')`);
  for (let k = 0; k < 2; k++) {
    t0 = performance.now();
    await duck.run(`COPY t TO '${join(dir, "d.parquet")}' (FORMAT parquet, COMPRESSION snappy)`);
    const s = (performance.now() - t0) / 1000;
    console.log(`duckdb: ${(N / s).toFixed(0)} rows/s`);
  }
  duck.closeSync();
  await rm(dir, { recursive: true, force: true });
});
