// Where a batch create's database time goes (issue 13: "make every index pay
// for itself"), on the store's own statements replayed through pg, as the
// create benchmark's context line sends them:
//   1. each statement of a batch, its mean time over the run;
//   2. the write rate with each secondary index and each trigger of the
//      write path dropped in turn (and all secondary indexes at once), each
//      variant in a database of its own, interleaved round by round.
//   npx tsx bench/create-costs.ts [batches=40]
// Context for BENCHMARKS.md, not a benchmark line: nothing here has a target.
import type pg from "pg";
import { createResources } from "../src/store/index.js";
import { replay } from "./create.bench.js";
import { captureStatements, type Statement } from "./support/capture.js";
import { connect, withDatabase } from "./support/database.js";
import { migrateDatabase } from "./support/load.js";
import { batchAt } from "./support/workload.js";

const batches = Number(process.argv[2] ?? 40);
const size = 1000;
const rounds = 4;
const concurrency = 2;

const statements: Statement[][] = [];
for (let b = 0; b < batches; b++) statements.push(await captureStatements((db) => createResources(db, batchAt("c", b, size))));

async function timeStatements(): Promise<void> {
  await withDatabase(async (db) => {
    await migrateDatabase(db.url);
    const client = await connect(db.url);
    try {
      const ms = new Array<number>(statements[0]!.length).fill(0);
      for (const batch of statements) {
        await client.query("BEGIN");
        for (const [i, s] of batch.entries()) {
          const t0 = performance.now();
          await client.query(s.sql, s.params);
          ms[i]! += performance.now() - t0;
        }
        await client.query("COMMIT");
      }
      console.log(`each statement of a batch of ${size}, mean over ${batches} batches into an empty table:`);
      for (const [i, s] of statements[0]!.entries()) console.log(`  ${(ms[i]! / batches).toFixed(2).padStart(7)} ms  ${s.sql.replace(/\s+/g, " ").slice(0, 90)}`);
    } finally {
      await client.end();
    }
  });
}

async function variants(): Promise<Record<string, string[]>> {
  return withDatabase(async (db) => {
    await migrateDatabase(db.url);
    const c = await connect(db.url);
    try {
      const indexes = (
        await c.query<{ name: string }>(
          "SELECT indexname AS name FROM pg_indexes WHERE tablename IN ('resources', 'resource_versions') AND indexname NOT LIKE '%_pkey' ORDER BY 1",
        )
      ).rows.map((r) => r.name);
      const triggers = (
        await c.query<{ name: string; table: string }>(
          "SELECT t.tgname AS name, c.relname AS table FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal ORDER BY 1",
        )
      ).rows;
      const out: Record<string, string[]> = { "as migrated": [] };
      for (const i of indexes) out[`without index ${i}`] = [`DROP INDEX ${i}`];
      for (const t of triggers) out[`without trigger ${t.name}`] = [`DROP TRIGGER ${t.name} ON ${t.table}`];
      out["without any secondary index"] = indexes.map((i) => `DROP INDEX ${i}`);
      return out;
    } finally {
      await c.end();
    }
  });
}

async function writeRates(drops: Record<string, string[]>): Promise<void> {
  const names = Object.keys(drops);
  const clients: Record<string, pg.Client[]> = {};
  const seconds: Record<string, number> = {};
  const open = async (i: number): Promise<void> => {
    if (i === names.length) return run();
    await withDatabase(async (db) => {
      const name = names[i]!;
      await migrateDatabase(db.url);
      const c = await connect(db.url);
      for (const sql of drops[name]!) await c.query(sql);
      await c.end();
      clients[name] = await Promise.all(Array.from({ length: concurrency }, () => connect(db.url)));
      seconds[name] = 0;
      try {
        await open(i + 1);
      } finally {
        await Promise.all(clients[name].map((x) => x.end()));
      }
    });
  };
  const run = async (): Promise<void> => {
    const per = Math.ceil(batches / rounds);
    for (let first = 0; first < batches; first += per) {
      for (const name of names) {
        let next = first;
        const last = Math.min(batches, first + per);
        const t0 = performance.now();
        await Promise.all(clients[name]!.map(async (c) => {
          while (next < last) await replay(c, statements[next++]!);
        }));
        seconds[name]! += (performance.now() - t0) / 1000;
      }
    }
  };
  await open(0);
  const base = seconds["as migrated"]!;
  console.log(`write rate of the store's statements (${batches} batches of ${size}, ${concurrency} in flight, ${rounds} interleaved rounds):`);
  for (const name of names) {
    console.log(`  ${name.padEnd(52)} ${((batches * size) / seconds[name]!).toFixed(0).padStart(7)} rows/s  x${(base / seconds[name]!).toFixed(2)}`);
  }
}

await timeStatements();
await writeRates(await variants());
