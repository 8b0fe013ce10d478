// A batch is atomic even when its database connection dies halfway: the
// batch waits on a lock we hold (after it has already written some rows),
// we terminate its backend, and nothing of it may remain. Then the store
// keeps serving. PostgreSQL only: PGlite has no second connection.
import { Code } from "@connectrpc/connect";
import pg from "pg";
import { expect, it } from "vitest";
import { describeBackends, uid } from "./backends.js";
import { ds, expectCode, study } from "./helpers.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

describeBackends(
  "connection killed mid-batch",
  (backend) => {
    it("rolls the whole batch back and keeps serving", async () => {
      const { store, url } = backend();
      if (url === undefined) throw new Error("a PostgreSQL suite without a URL");
      const p = uid();
      await store.create(LOCAL_CALLER, [ds(`${p}a`), ds(`${p}b`), study(`${p}c`, `${p}a`)]);
      const before = await store.read(ALL_GRANTS, [`${p}a`, `${p}b`, `${p}c`]);

      const holder = new pg.Client({ connectionString: url });
      await holder.connect();
      try {
        await holder.query("BEGIN");
        // The batch takes the clock (its first write), then blocks writing b's row.
        await holder.query("SELECT 1 FROM resources WHERE identifier = $1 FOR UPDATE", [`${p}b`]);
        const batch = store.update(LOCAL_CALLER, [
          [`${p}a`, { license: "L1" }],
          [`${p}b`, { license: "L2" }],
          [`${p}c`, { parentIdentifier: `${p}b` }],
        ]);
        const settled = batch.then(
          () => undefined,
          (err: unknown) => err,
        );
        let pid: number | undefined;
        for (let i = 0; i < 200 && pid === undefined; i++) {
          const { rows } = await holder.query<{ pid: number }>(
            `SELECT pid FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'`,
          );
          pid = rows[0]?.pid;
          if (pid === undefined) await new Promise((r) => setTimeout(r, 25));
        }
        expect(pid, "the batch should be waiting on the lock").toBeDefined();
        await holder.query("SELECT pg_terminate_backend($1)", [pid]);
        await expectCode(batch, Code.Unavailable);
        expect(await settled).toBeDefined();
        await holder.query("ROLLBACK");
      } finally {
        await holder.end();
      }

      expect(await store.read(ALL_GRANTS, [`${p}a`, `${p}b`, `${p}c`])).toEqual(before);
      const { rows } = await store.db.query<{ n: string }>(
        "SELECT count(*)::text AS n FROM resource_history WHERE identifier = ANY($1::text[])",
        [[`${p}a`, `${p}b`, `${p}c`]],
      );
      expect(Number(rows[0]?.n)).toBe(3);
      // still serving, on a fresh connection
      expect((await store.update(LOCAL_CALLER, [[`${p}b`, { license: "L3" }]])).count).toBe(1);
      expect((await store.read(ALL_GRANTS, [`${p}b`]))[0]).toMatchObject({ license: "L3", version: 2 });
      await store.db.ping();
    });
  },
  ["postgres"],
);
