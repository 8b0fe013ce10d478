// Several service processes on one database elect one lineage view
// refresher (a session advisory lock): only the elected one refreshes, and
// when it stops another takes over. On PGlite there is no view: none leads.
import { expect, it } from "vitest";
import { createLineageRefresher, createResourceStore, openDatabase, withLineageSnapshot, type Db, type LineageRefresher } from "../../src/store/index.js";
import { describeBackends } from "../store/backends.js";
import { ds, study } from "../store/helpers.js";
import { LOCAL_CALLER } from "../../src/access/index.js";

const fresh = (db: Db) => withLineageSnapshot(db, (_q, f) => Promise.resolve(f));

async function until(what: string, ok: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describeBackends("lineage refresher election", (backend) => {
  it("one of several processes refreshes; another takes over when it stops", async () => {
    const b = backend();
    // A second "process": its own pool on the same database.
    const other = b.url !== undefined ? await openDatabase({ databaseUrl: b.url, poolSize: 2 }) : b.db;
    const opts = { debounceMs: 20, maxDelayMs: 200, electionMs: 50 };
    const first: LineageRefresher = createLineageRefresher({ db: b.db, ...opts });
    const second: LineageRefresher = createLineageRefresher({ db: other, ...opts });
    try {
      await first.start();
      await second.start();
      if (b.kind === "pglite") {
        expect([first.leader, second.leader]).toEqual([false, false]);
        return;
      }
      expect([first.leader, second.leader]).toEqual([true, false]);

      await b.store.create(LOCAL_CALLER, [ds("e1"), study("e1s", "e1")]);
      await until("the view is fresh", async () => {
        await first.settled();
        return fresh(b.db);
      });
      expect(first.refreshes).toBeGreaterThan(0);
      // Written from the other process too: still only the leader refreshes.
      await createResourceStore(other).create(LOCAL_CALLER, [study("e1t", "e1")]);
      await until("the view is fresh again", async () => {
        await first.settled();
        return fresh(b.db);
      });
      await second.settled();
      expect(second.refreshes).toBe(0);

      await first.stop();
      await until("the second refresher is elected", () => second.leader);
      const before = second.refreshes;
      await b.store.create(LOCAL_CALLER, [study("e1u", "e1s")]);
      await until("the new leader refreshed", async () => {
        await second.settled();
        return second.refreshes > before && (await fresh(b.db));
      });
      expect(first.leader).toBe(false);
    } finally {
      await first.stop();
      await second.stop();
      if (other !== b.db) await other.close();
    }
  });

  it("elects again when the leader's lock connection is lost", async () => {
    const b = backend();
    if (b.url === undefined) {
      // PGlite: no view, nothing to elect.
      const only = createLineageRefresher({ db: b.db, electionMs: 50 });
      await only.start();
      expect(only.leader).toBe(false);
      await only.stop();
      return;
    }
    const other = await openDatabase({ databaseUrl: b.url, poolSize: 2 });
    const opts = { debounceMs: 20, maxDelayMs: 200, electionMs: 50, reconnectMs: 50 };
    const first = createLineageRefresher({ db: b.db, ...opts });
    const second = createLineageRefresher({ db: other, ...opts });
    try {
      await first.start();
      await second.start();
      expect([first.leader, second.leader]).toEqual([true, false]);
      const { rows } = await b.db.query<{ ok: boolean }>(
        `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
          WHERE datname = current_database() AND query LIKE 'SELECT pg_try_advisory_lock%' AND pid <> pg_backend_pid()`,
      );
      expect(rows.map((r) => r.ok)).toEqual([true]);
      await until("the first refresher steps down or another is elected", () => !first.leader || second.leader);
      await until("exactly one refresher leads", () => first.leader !== second.leader);
      const leader = first.leader ? first : second;
      const before = leader.refreshes;
      await b.store.create(LOCAL_CALLER, [ds("e2"), study("e2s", "e2")]);
      await until("the leader refreshed", async () => {
        await leader.settled();
        return leader.refreshes > before && (await fresh(b.db));
      });
      expect(first.leader !== second.leader).toBe(true);
    } finally {
      await first.stop();
      await second.stop();
      await other.close();
    }
  });
});
