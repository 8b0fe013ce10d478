// Where a batch create's database time goes (docs/benchmarks/create.md, "the tree checks of every write":
// "every index pays for itself"), on the store's own statements replayed through pg, as the
// create benchmark's context line sends them:
//   1. each statement of a batch, its mean time over the run;
//   2. the write rate with each secondary index and each trigger of the
//      write path dropped in turn (and all secondary indexes at once), each
//      variant in a database of its own, interleaved round by round.
//   npx tsx bench/create-costs.ts [batches=40]
// Context for docs/benchmarks/create.md, not a benchmark line: nothing here has a target.
import { createResources } from "../src/store/index.js";
import { baselineWriter, interleaved } from "./create.bench.js";
import { captureStatements, type Statement } from "./support/capture.js";
import { connect, withDatabase } from "./support/database.js";
import { migrateDatabase } from "./support/load.js";
import { batchAt } from "./support/workload.js";
import { LOCAL_CALLER } from "../src/access/index.js";

const batches = Number(process.argv[2] ?? 40);
const size = 1000;
const rounds = 4;
const concurrency = 2;

const statements: Statement[][] = [];
for (let b = 0; b < batches; b++)
  statements.push(await captureStatements((db) => createResources(db, LOCAL_CALLER, batchAt("c", b, size))));

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
      for (const [i, s] of statements[0]!.entries())
        console.log(`  ${(ms[i]! / batches).toFixed(2).padStart(7)} ms  ${s.sql.replace(/\s+/g, " ").slice(0, 90)}`);
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

/** Each variant's database migrated, its drops applied, then the store's statements replayed into all of them, round by round. */
async function writeRates(drops: Record<string, string[]>): Promise<void> {
  const names = Object.keys(drops);
  const writers: Parameters<typeof interleaved>[0] = {};
  const open = async (i: number): Promise<Record<string, number>> => {
    if (i === names.length) return interleaved(writers, batches, size, concurrency, rounds);
    return withDatabase(async (db) => {
      const name = names[i]!;
      await migrateDatabase(db.url);
      const c = await connect(db.url);
      try {
        for (const sql of drops[name]!) await c.query(sql);
      } finally {
        await c.end();
      }
      const writer = await baselineWriter(db.url, `v${i}`, batches, size, concurrency);
      writers[name] = { write: writer.write, countUrl: db.url };
      try {
        return await open(i + 1);
      } finally {
        await writer.close();
      }
    });
  };
  const rates = await open(0);
  const base = rates["as migrated"]!;
  console.log(
    `write rate of the store's statements (${batches} batches of ${size}, ${concurrency} in flight, ${rounds} interleaved rounds):`,
  );
  for (const name of names)
    console.log(
      `  ${name.padEnd(52)} ${rates[name]!.toFixed(0).padStart(7)} rows/s  x${(rates[name]! / base).toFixed(2)}`,
    );
}

await timeStatements();
await writeRates(await variants());
