// `resource-store dump` and `restore` against PostgreSQL's
// own tools on the same tables: versions a second of writeDump (the dump
// command's code) against pg_dump (custom format, gzip as ours, data only)
// of every table the dump carries, and of restoreDump into a migrated, empty
// store against pg_restore (data only, one transaction) into another.
// Rounds interleave ours and the baseline; each restore gets a fresh
// database, migrated untimed. Target >= 0.5 for both.
//
// The store is written here by set-based SQL in the store's shape (as
// bench/support/bulk.ts does): resources with several versions each, under
// patients (so attribution has periods to carry), the registry's rows, the
// clock at the last stamp, the attribution table filled as the writes keep it,
// and the log of counts derived from that history (every version its own
// transaction, so a row of the log each).
import { execFile } from "node:child_process";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { openDatabase, restoreDump, writeDump } from "../src/store/index.js";
import { connect, createBenchDatabase, withDatabase, type BenchDatabase } from "./support/database.js";
import { migrateDatabase } from "./support/load.js";
import { context, fmt, mb, median, type Result } from "./support/measure.js";
import type { BenchOptions } from "./options.js";

const run = promisify(execFile);

export const DUMP_TARGET = 0.5;
export const RESTORE_TARGET = 0.5;

/** What pg_dump copies: the tables a dump carries (the clock is one row, set by both). */
const TABLES = [
  "resources",
  "resource_versions",
  "resource_attribution",
  "registry_keys",
  "registry_key_chains",
  "registry_patients",
  "registry_studies",
  "datasource_counts_log",
];

/** Every tenth resource a patient of one of 10 datasources, the nine after it its children; `versions` versions each. */
export async function loadStore(url: string, resources: number, versions: number): Promise<number> {
  const c = await connect(url);
  try {
    // Resource i, version v commits at base + (v * n + i) µs: every commit its own stamp, periods contiguous.
    const common = `FROM generate_series(0, $1::int - 1) AS i,
      LATERAL (SELECT 'd-' || lpad(i::text, 8, '0') AS id,
                      CASE WHEN i % 10 = 0 THEN 'patient' ELSE 'annotation' END AS type,
                      CASE WHEN i % 10 = 0 THEN NULL ELSE 'd-' || lpad((i - i % 10)::text, 8, '0') END AS parent,
                      timestamptz '2026-01-01T00:00:00Z' AS base) AS r`;
    const payload = (v: string) => `CASE WHEN r.type = 'patient'
        THEN jsonb_build_object('datasource_id', 'ds-' || (i / 10) % 10, 'sex', 'female', 'birth_year', 1950 + ${v})
        ELSE jsonb_build_object('label', 'finding ' || ${v}, 'value', (i % 97) / 7.0, 'text', 'a finding of resource ' || r.id || ' as of version ' || ${v}, 'annotator', 'reader-' || (i % 5)) END`;
    const at = (v: string) => `r.base + ((${v}) * $1::bigint + i) * interval '1 microsecond'`;
    await c.query(
      `INSERT INTO resource_versions (identifier, version, tx_from, tx_to, payload_type, parent_identifier, license, access_level,
          derived_from, payload, created_at, updated_at, is_deleted, deleted_by, actor)
       SELECT r.id, v, ${at("v")}, ${at("v + 1")}, r.type, r.parent, 'L-' || v, 'internal', '{}', ${payload("v")},
              ${at("1")}, ${at("v")}, false, NULL, 'actor-' || (v % 3)
         ${common}, generate_series(1, $2::int - 1) AS v`,
      [resources, versions],
    );
    await c.query(
      `INSERT INTO resources (identifier, payload_type, parent_identifier, license, access_level, derived_from, payload,
          created_at, updated_at, version, is_deleted, deleted_by, actor, datasource_id)
       SELECT r.id, r.type, r.parent, 'L-' || $2::int, 'internal', '{}', ${payload("$2::int")}, ${at("1")}, ${at("$2::int")}, $2::int, false, NULL,
              'actor-' || ($2::int % 3), 'ds-' || (i / 10) % 10
         ${common}`,
      [resources, versions],
    );
    // As the writes keep it: one period from the first version on, the datasource never changing.
    await c.query(
      `INSERT INTO resource_attribution (identifier, datasource_id, tx_from, tx_to)
       SELECT r.id, 'ds-' || (i / 10) % 10, ${at("1")}, 'infinity' ${common}`,
      [resources],
    );
    await c.query(
      "INSERT INTO registry_key_chains (chain, key_ids) VALUES ('default', ARRAY['default']) ON CONFLICT DO NOTHING",
    );
    await c.query(
      `INSERT INTO registry_patients (identifier, datasource_id, uid_hash, key_chain, registered_at)
       SELECT r.id, 'ds-' || (i / 10) % 10, sha256(convert_to(r.id, 'UTF8')), 'default', ${at("0")} ${common} WHERE i % 10 = 0`,
      [resources],
    );
    await c.query(
      `UPDATE clock SET last = timestamptz '2026-01-01T00:00:00Z' + (($2::bigint + 1) * $1::bigint) * interval '1 microsecond'`,
      [resources, versions],
    );
    // The log of counts as the writes would have kept it (migration 28), which a dump carries.
    await c.query("SELECT datasource_counts_rebuild()");
    await c.query("ANALYZE");
    const { rows } = await c.query<{ n: string }>(
      "SELECT (SELECT count(*) FROM resources) + (SELECT count(*) FROM resource_versions) AS n",
    );
    return Number(rows[0]!.n);
  } finally {
    await c.end();
  }
}

async function seconds(fn: () => Promise<unknown>): Promise<number> {
  const start = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - start) / 1e9;
}

async function oursDump(url: string, file: string): Promise<number> {
  const db = await openDatabase({ databaseUrl: url, poolSize: 2 });
  try {
    return (await writeDump(db, createWriteStream(file))).versions;
  } finally {
    await db.close();
  }
}

async function oursRestore(url: string, file: string): Promise<number> {
  const db = await openDatabase({ databaseUrl: url, poolSize: 2 });
  try {
    const summary = await restoreDump(db, createReadStream(file));
    // The log of counts the dump carries is taken, not started again (which would be the cheaper path).
    if (!summary.countsLog) throw new Error("the restore did not take the dump's log of counts");
    return summary.versions;
  } finally {
    await db.close();
  }
}

const pgDump = (url: string, file: string) =>
  run("pg_dump", ["--format=custom", "--data-only", ...TABLES.flatMap((t) => ["-t", t]), "-f", file, "-d", url]);
const pgRestore = (url: string, file: string) =>
  run("pg_restore", ["--data-only", "--single-transaction", "-d", url, file]);

/** A migrated, empty store for one restore; dropped after it. */
async function freshStore<T>(fn: (db: BenchDatabase) => Promise<T>): Promise<T> {
  const db = await createBenchDatabase();
  try {
    await migrateDatabase(db.url);
    return await fn(db);
  } finally {
    await db.drop();
  }
}

export async function dumpBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const resources = opts.quick ? 10_000 : 50_000;
  const perResource = 10;
  const rounds = opts.quick ? 3 : 5;
  const { stdout: version } = await run("pg_dump", ["--version"]);
  context(
    `dump/restore: ${fmt(resources)} resources x ${perResource} versions, ${rounds} interleaved rounds; ${version.trim()}`,
  );
  const dir = await mkdtemp(join(tmpdir(), "rs-bench-dump-"));
  try {
    return await withDatabase(async (source) => {
      await migrateDatabase(source.url);
      const versions = await loadStore(source.url, resources, perResource);
      const ours = join(dir, "store.rsdump.gz");
      const theirs = join(dir, "store.pgdump");
      const times = {
        dump: [] as number[],
        pgDump: [] as number[],
        restore: [] as number[],
        pgRestore: [] as number[],
      };
      for (let round = 0; round < rounds; round++) {
        for (const f of [ours, theirs]) await rm(f, { force: true });
        // Dump: alternate which goes first.
        const dumps: [keyof typeof times, () => Promise<unknown>][] = [
          [
            "dump",
            async () => {
              const n = await oursDump(source.url, ours);
              if (n !== versions) throw new Error(`the dump wrote ${n} versions, the store holds ${versions}`);
            },
          ],
          ["pgDump", () => pgDump(source.url, theirs)],
        ];
        if (round % 2 === 1) dumps.reverse();
        for (const [name, fn] of dumps) times[name].push(await seconds(fn));
        // Restore: each into a fresh migrated store.
        const restores: [keyof typeof times, (url: string) => Promise<unknown>][] = [
          [
            "restore",
            async (url) => {
              const n = await oursRestore(url, ours);
              if (n !== versions) throw new Error(`the restore loaded ${n} versions, the dump holds ${versions}`);
            },
          ],
          ["pgRestore", (url) => pgRestore(url, theirs)],
        ];
        if (round % 2 === 1) restores.reverse();
        for (const [name, fn] of restores) times[name].push(await freshStore((db) => seconds(() => fn(db.url))));
      }
      const rate = (xs: number[]) => versions / median(xs);
      context(`files: ours ${mb((await stat(ours)).size)}, pg_dump ${mb((await stat(theirs)).size)}`);
      for (const [name, xs] of Object.entries(times)) {
        context(
          `${name}: median ${fmt(median(xs), 2)} s (${xs.map((x) => fmt(x, 2)).join(", ")}), ${fmt(rate(xs))} versions/s`,
        );
      }
      return [
        { name: "dump", ratio: rate(times.dump) / rate(times.pgDump), op: ">=", target: DUMP_TARGET },
        { name: "restore", ratio: rate(times.restore) / rate(times.pgRestore), op: ">=", target: RESTORE_TARGET },
      ];
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
