// Migration 0028 derives the log of counts from the whole history. Before it,
// a store migrated to 0023 with a history of its own had a log that started
// at the migration: statistics at an earlier point read the history, per
// resource. Here a store is written at schema 27, its statistics are read
// at every point while its log still covers them, the log is then
// restarted (as migration 0023 started it for an older store), and after
// migration 0028 every point answers as before, from the log: no statement
// reads the history, for a caller who sees everything.
import pg from "pg";
import { expect, it } from "vitest";
import { LOCAL_CALLER } from "../../src/access/index.js";
import { migrate, migrations } from "../../src/store/index.js";
import { describeBackends, describeFreshStores } from "../store/backends.js";
import { readsHistory, statsAtPoints, writeHistory } from "./history-support.js";

const BEFORE = migrations.filter((m) => m.id <= 27);

describeFreshStores("migration 0028: the log over the history", (fresh) => {
  it("answers statistics at every past point from the log, as the history did", async () => {
    const db = await fresh(BEFORE);
    const points = await writeHistory(db);
    // Written at 27 from an empty store: its log covers every point.
    const before = await statsAtPoints(db, points);
    expect(JSON.stringify(before)).toContain('"B"');
    // As migration 0023 left a store with a history: a log that starts now.
    await db.query("SELECT datasource_counts_restart()");
    await migrate(db);
    expect(await statsAtPoints(db, points)).toEqual(before);
    expect(await readsHistory(db, points)).toBe(false);
  });
});

// The rebuild holds the clock row, as every writer does first (store/sql.ts, tickClock): a writer of an older
// instance still running while another migrates cannot log its groups beside it. Here a transaction holds the
// clock and logs a row no version explains; the rebuild waits for it, then derives the log from the history
// alone, so the row is gone. Without the clock, the rebuild ran beside it and left the row.
describeBackends(
  "the log's rebuild and a writer beside it",
  (backend) => {
    it("waits for the writer holding the clock, then derives what it committed", async () => {
      const { db, url, store } = backend();
      await store.create(LOCAL_CALLER, [
        { identifier: "clock-p", payloadType: "patient", payload: { datasource_id: "clock-D" } },
      ]);
      const writer = new pg.Client({ connectionString: url });
      await writer.connect();
      try {
        await writer.query("BEGIN");
        await writer.query("UPDATE clock SET last = greatest(clock_timestamp(), last + interval '1 microsecond')");
        await writer.query(
          `INSERT INTO datasource_counts_log (datasource_id, payload_type, access_level, tx_from, resources, total_bytes)
           SELECT 'clock-none', 'file', 'public', last, 1, 0 FROM clock`,
        );
        const rebuilt = db.query("SELECT datasource_counts_rebuild()");
        // The rebuild is waiting for a lock held by the writer's transaction.
        const writerPid = (await writer.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
        let waiting = false;
        for (let i = 0; i < 200 && !waiting; i++) {
          const { rows } = await writer.query<{ n: string }>(
            "SELECT count(*)::text AS n FROM pg_locks WHERE NOT granted AND $1::int = ANY(pg_blocking_pids(pid))",
            [writerPid],
          );
          waiting = rows[0]?.n !== "0";
          if (!waiting) await new Promise((r) => setTimeout(r, 25));
        }
        expect(waiting).toBe(true);
        await writer.query("COMMIT");
        await rebuilt;
        const { rows } = await db.query<{ n: string }>(
          "SELECT count(*)::text AS n FROM datasource_counts_log WHERE datasource_id = 'clock-none'",
        );
        expect(rows[0]?.n).toBe("0");
        const { rows: kept } = await db.query<{ n: string }>(
          "SELECT count(*)::text AS n FROM datasource_counts_log WHERE datasource_id = 'clock-D'",
        );
        expect(Number(kept[0]?.n)).toBeGreaterThan(0);
      } finally {
        await writer.query("ROLLBACK").catch(() => {});
        await writer.end();
      }
    });
  },
  ["postgres"],
);
