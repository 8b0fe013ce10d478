import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { createResourceStore, migrate, openDatabase, migrations } from "../../src/store/index.js";
import { openMemoryStore } from "../support/pglite-image.js";
import { createTestDatabase } from "../support/postgres.js";
import { describeBackends, uid } from "./backends.js";
import { ds, expectCode } from "./helpers.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

const allIds = migrations.map((m) => m.id).sort((a, b) => a - b);

describeBackends("database layer", (backend) => {
  it("applies migrations once, also when several processes start together", async () => {
    const { kind, url, db } = backend();
    expect(await migrate(db)).toEqual([]);
    if (kind === "postgres" && url) {
      // A database nobody migrated yet, and three processes starting on it at once.
      const fresh = await createTestDatabase();
      const starting = await Promise.all([1, 2, 3].map(() => openDatabase({ databaseUrl: fresh.url, poolSize: 1 })));
      try {
        const applied = await Promise.all(starting.map((o) => migrate(o)));
        expect(applied.flat().sort((a, b) => a - b)).toEqual(allIds);
      } finally {
        await Promise.all(starting.map((o) => o.close()));
        await fresh.drop();
      }
    }
    const { rows } = await db.query<{ id: number }>("SELECT id FROM schema_migrations ORDER BY id");
    expect(rows.map((r) => Number(r.id))).toEqual(allIds);
  });

  it("a read snapshot transaction is REPEATABLE READ and read-only; a plain one is neither", async () => {
    const { db } = backend();
    const settings = (readOnlySnapshot: boolean) =>
      db.transaction(
        async (tx) => {
          const { rows } = await tx.query<{ iso: string; ro: string }>(
            "SELECT current_setting('transaction_isolation') AS iso, current_setting('transaction_read_only') AS ro",
          );
          return rows[0];
        },
        { readOnlySnapshot },
      );
    expect(await settings(true)).toEqual({ iso: "repeatable read", ro: "on" });
    expect(await settings(false)).toEqual({ iso: "read committed", ro: "off" });
    // Nothing can be written in it.
    await expect(
      db.transaction((tx) => tx.query("CREATE TABLE snapshot_write_probe (x int)"), { readOnlySnapshot: true }),
    ).rejects.toThrow();
  });

  it("hands timestamps and int8 back as strings, never as Date or lossy numbers", async () => {
    const { db } = backend();
    const { rows } = await db.query<{ t: unknown; n: unknown }>(
      "SELECT '2026-11-21 23:05:01.123456+00'::timestamptz AS t, 9007199254740993::int8 AS n",
    );
    expect(typeof rows[0]?.t).toBe("string");
    expect(String(rows[0]?.t)).toContain("01.123456");
    expect(rows[0]?.n).toBe("9007199254740993");
  });

  it("answers internal without SQL for a broken statement and keeps serving", async () => {
    const { db, store } = backend();
    const err = await expectCode(db.query("SELEC nonsense FROM nowhere"), Code.Internal);
    expect(err.rawMessage).toBe("internal error");
    await expectCode(
      db.transaction((tx) => tx.query("SELECT * FROM no_such_table")),
      Code.Internal,
    );
    const p = uid();
    expect((await store.create(LOCAL_CALLER, [ds(`${p}a`)])).count).toBe(1);
  });
});

it("an unreachable PostgreSQL is unavailable, not internal", async () => {
  const db = await openDatabase({ databaseUrl: "postgres://postgres@127.0.0.1:1/nothing" });
  try {
    await expectCode(db.ping(), Code.Unavailable);
    await expectCode(
      db.transaction((tx) => tx.query("SELECT 1")),
      Code.Unavailable,
    );
  } finally {
    await db.close();
  }
});

it("PGlite persists under <dataDir>/pglite", async () => {
  const dir = await mkdtemp(join(tmpdir(), "rs-pglite-"));
  try {
    const first = await openDatabase({ dataDir: dir });
    await migrate(first);
    await createResourceStore(first).create(LOCAL_CALLER, [ds("kept")]);
    await first.close();
    const again = await openDatabase({ dataDir: dir });
    expect(await migrate(again)).toEqual([]);
    expect((await createResourceStore(again).read(ALL_GRANTS, ["kept"])).map((r) => r.identifier)).toEqual(["kept"]);
    await again.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

// PGlite runs no autovacuum: without its own ANALYZE the planner never had
// statistics (an equality filter on a file's path read two indexes and
// rechecked rows; docs/scaling.md). Writes through the store start one.
it("PGlite analyses its tables as they grow through the store's writes", async () => {
  const db = await openMemoryStore();
  try {
    await migrate(db);
    const store = createResourceStore(db);
    await store.create(LOCAL_CALLER, [ds("an-ds")]);
    for (let batch = 0; batch < 40; batch++) {
      await store.create(
        LOCAL_CALLER,
        Array.from({ length: 125 }, (_, i) => ({
          identifier: `an-f${batch}-${i}`,
          payloadType: "file",
          parentIdentifier: "an-ds",
          payload: { path: `s3://b/an/${batch}/${i}`, size_bytes: 1, content_type: "application/dicom" },
        })),
      );
    }
    await db.analyzed?.();
    const { rows } = await db.query<{ tuples: number; path_stats: boolean }>(
      `SELECT (SELECT reltuples FROM pg_class WHERE oid = 'resources'::regclass)::float8 AS tuples,
              EXISTS (SELECT 1 FROM pg_stats WHERE tablename = 'resources_payload_path_idx') AS path_stats`,
    );
    // A check starts at least every 16 writes: the last of these 41 saw 24 batches of files or more.
    expect(rows[0]!.tuples).toBeGreaterThanOrEqual(24 * 125);
    expect(rows[0]!.path_stats).toBe(true);
  } finally {
    await db.close();
  }
});
