// Many clients writing at once (PostgreSQL; PGlite has one connection and
// runs the same test serialised): no lost update, contiguous version
// periods, exactly one open version per identifier, stamps strictly
// increasing in commit order.
import { Code, ConnectError } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { createResourceStore, openDatabase, ts } from "../../src/store/index.js";
import { describeBackends, uid } from "./backends.js";
import { ds, micros } from "./helpers.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

interface VersionRow {
  identifier: string;
  version: string;
  tx_from: string;
  tx_to: string;
  license: string | null;
}

describeBackends("concurrent batches", (backend) => {
  it("loses no update and keeps periods gapless, non-overlapping and ordered", async () => {
    const { kind, url, store: shared } = backend();
    const p = uid();
    const ids = ["a", "b", "c", "d"].map((x) => `${p}${x}`);
    await shared.create(
      LOCAL_CALLER,
      ids.map((id) => ds(id)),
    );
    // Several independent clients (each its own pool) on PostgreSQL.
    const clients =
      kind === "postgres" && url
        ? await Promise.all([1, 2, 3, 4].map(() => openDatabase({ databaseUrl: url, poolSize: 3 })))
        : [];
    const stores = clients.length > 0 ? clients.map((d) => createResourceStore(d)) : [shared];
    const workers = 12;
    const rounds = 10;
    const stamps: string[] = [];
    try {
      await Promise.all(
        Array.from({ length: workers }, async (_, w) => {
          const store = stores[w % stores.length]!;
          for (let r = 0; r < rounds; r++) {
            // Each update writes a value nobody else writes, so each is a change.
            const batch = ids
              .filter((_, i) => (i + w + r) % 2 === 0)
              .map((id) => [id, { license: `w${w}r${r}` }] as const);
            const res = await store.update(LOCAL_CALLER, batch);
            expect(res.count).toBe(batch.length);
            stamps.push(res.at);
          }
        }),
      );
    } finally {
      await Promise.all(clients.map((c) => c.close()));
    }
    expect(new Set(stamps).size).toBe(stamps.length);

    const { rows } = await shared.db.query<VersionRow>(
      `SELECT v.identifier, v.version::text AS version, ${ts("v.tx_from")} AS tx_from,
              CASE WHEN v.tx_to = 'infinity' THEN 'infinity' ELSE ${ts("v.tx_to")} END AS tx_to, v.license
         FROM resource_history v WHERE v.identifier = ANY($1::text[]) ORDER BY v.identifier, v.version`,
      [ids],
    );
    const written = (workers * rounds * ids.length) / 2;
    expect(rows.length).toBe(ids.length + written);
    const current = await shared.read(ALL_GRANTS, ids, { excludeChildren: true });
    for (const id of ids) {
      const versions = rows.filter((r) => r.identifier === id);
      const now = current.find((c) => c.identifier === id)!;
      // no lost update: one version per successful write, numbered 1..n
      expect(versions.map((v) => Number(v.version))).toEqual(versions.map((_, i) => i + 1));
      expect(now.version).toBe(versions.length);
      expect(versions.filter((v) => v.tx_to === "infinity").length).toBe(1);
      expect(versions.at(-1)?.tx_to).toBe("infinity");
      expect(versions.at(-1)?.license).toBe(now.license);
      for (let i = 1; i < versions.length; i++) {
        expect(versions[i - 1]!.tx_to).toBe(versions[i]!.tx_from);
      }
    }
    // commit order = stamp order: per identifier, each later version starts
    // strictly later, at the stamp its batch reported
    const reported = new Set(stamps);
    for (const id of ids) {
      const versions = rows.filter((r) => r.identifier === id).slice(1);
      for (let i = 0; i < versions.length; i++) {
        expect(reported.has(versions[i]!.tx_from)).toBe(true);
        if (i > 0) expect(micros(versions[i]!.tx_from) > micros(versions[i - 1]!.tx_from)).toBe(true);
      }
    }
  });

  it("of many clients creating one identifier, exactly one succeeds", async () => {
    const { kind, url, store: shared } = backend();
    const id = uid("race");
    const clients =
      kind === "postgres" && url
        ? await Promise.all([1, 2, 3, 4].map(() => openDatabase({ databaseUrl: url, poolSize: 2 })))
        : [];
    const stores = clients.length > 0 ? clients.map((d) => createResourceStore(d)) : [shared];
    try {
      const results = await Promise.allSettled(
        Array.from({ length: 8 }, (_, i) => stores[i % stores.length]!.create(LOCAL_CALLER, [ds(id)])),
      );
      expect(results.filter((r) => r.status === "fulfilled").length).toBe(1);
      for (const r of results) {
        if (r.status === "rejected") {
          expect(r.reason).toBeInstanceOf(ConnectError);
          expect((r.reason as ConnectError).code).toBe(Code.FailedPrecondition);
        }
      }
    } finally {
      await Promise.all(clients.map((c) => c.close()));
    }
    expect((await shared.read(ALL_GRANTS, [id]))[0]?.version).toBe(1);
  });
});
