// The lineage view on PostgreSQL: when it may answer, how it is refreshed,
// and that every answer is the same whether it is fresh, stale or absent.
import { expect, it } from "vitest";
import { createLineageRefresher, isLineageViewFresh, refreshLineageView, withLineageSnapshot, listChildren } from "../../src/store/index.js";
import { describeBackends } from "../store/backends.js";
import { ds, study } from "../store/helpers.js";
import { buildServices } from "./harness.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

const fresh = (b: { db: Parameters<typeof withLineageSnapshot>[0] }) => withLineageSnapshot(b.db, (_q, f) => Promise.resolve(f));

describeBackends("lineage view refresh", (backend) => {
  it("the admin endpoint refreshes it on PostgreSQL and has nothing to refresh on PGlite", async () => {
    const b = backend();
    const svc = await buildServices(b);
    await b.store.create(LOCAL_CALLER, [ds("a"), study("s", "a")]);
    const { message } = await svc.admin.refreshMaterializedViews({});
    if (b.kind === "pglite") {
      expect(message).toMatch(/nothing to refresh/);
      expect(await fresh(b)).toBe(false);
      return;
    }
    expect(message).toMatch(/refreshed/);
    expect(await fresh(b)).toBe(true);
    // a change that leaves the tree alone keeps it fresh
    await b.store.update(LOCAL_CALLER, [["s", { payload: { modality: "MR" } }]]);
    expect(await fresh(b)).toBe(true);
    // a create, a move, a delete or a restore makes it stale until the next refresh
    for (const change of [
      () => b.store.create(LOCAL_CALLER, [ds("b")]),
      () => b.store.update(LOCAL_CALLER, [["s", { parentIdentifier: "b" }]]),
      () => b.store.delete(LOCAL_CALLER, ["s"]),
      () => b.store.restore(LOCAL_CALLER, ["s"]),
    ]) {
      await change();
      expect(await fresh(b)).toBe(false);
      await svc.admin.refreshMaterializedViews({});
      expect(await fresh(b)).toBe(true);
    }
  });
});

describeBackends("lineage view kept fresh", (backend) => {
  it("a listening refresher keeps it fresh after writes from any connection", async () => {
    const b = backend();
    if (b.url === undefined) throw new Error("a PostgreSQL suite without a URL");
    const refresher = createLineageRefresher({ db: b.db, debounceMs: 20, maxDelayMs: 200 });
    await refresher.start();
    try {
      await b.store.create(LOCAL_CALLER, [ds("r"), study("r1", "r"), study("r2", "r1")]);
      await b.store.update(LOCAL_CALLER, [["r2", { parentIdentifier: "r" }]]);
      // Eventually fresh: the notification arrives after commit, then the debounce runs.
      const deadline = Date.now() + 30_000;
      while (!(await fresh(b)) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 25));
        await refresher.settled();
      }
      expect(await fresh(b)).toBe(true);
      expect(refresher.refreshes).toBeGreaterThan(0);
      const nodes = await listChildren(b.db, ALL_GRANTS, { parentIdentifier: "r" });
      expect(nodes.map((n) => [n.identifier, n.childCount, n.descendantCount])).toEqual([
        ["r1", 0, 0],
        ["r2", 0, 0],
      ]);
    } finally {
      await refresher.stop();
    }
  });
}, ["postgres"]);

describeBackends("lineage refresher", (backend) => {
  const waitFresh = async (settled: () => Promise<void>) => {
    const deadline = Date.now() + 30_000;
    while (!(await fresh(backend())) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 25));
      await settled();
    }
    return fresh(backend());
  };

  it("does nothing on PGlite, and on PostgreSQL comes back after its connection is killed", async () => {
    const b = backend();
    const refresher = createLineageRefresher({ db: b.db, debounceMs: 20, maxDelayMs: 200, reconnectMs: 50 });
    await refresher.start();
    try {
      await b.store.create(LOCAL_CALLER, [ds("k1")]);
      if (b.kind === "pglite") {
        await refresher.settled();
        expect(refresher.refreshes).toBe(0);
        return;
      }
      expect(await waitFresh(() => refresher.settled())).toBe(true);
      const { rows } = await b.db.query<{ ok: boolean }>(
        `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
          WHERE datname = current_database() AND query = 'LISTEN lineage_changed'`,
      );
      expect(rows.map((r) => r.ok)).toEqual([true]);
      // Written while nobody listens, or just after: the refresher catches up either way.
      await b.store.create(LOCAL_CALLER, [study("k2", "k1")]);
      expect(await fresh(b)).toBe(false);
      expect(await waitFresh(() => refresher.settled())).toBe(true);
    } finally {
      await refresher.stop();
    }
  });
});

// A random forest under random moves, deletes and restores; after every step
// the listing of every node (and the roots) is compared with a count made here
// from the active rows, with the view stale and again after a refresh.
describeBackends("children and counts agree with a model, view fresh or stale", (backend) => {
  it("random changes", async () => {
    const b = backend();
    const ids = Array.from({ length: 30 }, (_, i) => `n${String(i).padStart(2, "0")}`);
    let seed = 12345;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    // Each node's parent is an earlier node or none: a forest.
    await b.store.create(LOCAL_CALLER, ids.map((id, i) => (i === 0 || rand(4) === 0 ? ds(id) : study(id, ids[rand(i)] ?? null))));

    const check = async (label: string) => {
      const { rows } = await b.db.query<{ identifier: string; parent_identifier: string | null }>(
        "SELECT identifier, parent_identifier FROM resources WHERE NOT is_deleted",
      );
      const parentOf = new Map(rows.map((r) => [r.identifier, r.parent_identifier]));
      const kids = (p: string | null) => [...parentOf].filter(([, q]) => q === p).map(([id]) => id);
      const desc = (p: string): number => kids(p).reduce((n, k) => n + 1 + desc(k), 0);
      const expected = (p: string | null) =>
        kids(p)
          .sort()
          .map((id) => [id, kids(id).length, desc(id)]);
      const actual = async (p: string | null) =>
        (await listChildren(b.db, ALL_GRANTS, { parentIdentifier: p })).map((n) => [n.identifier, n.childCount, n.descendantCount]).sort();
      // the same batch stamped them all: order by identifier, so sort both sides
      expect(await actual(null), `${label}: roots`).toEqual(expected(null));
      for (const id of parentOf.keys()) expect(await actual(id), `${label}: ${id}`).toEqual(expected(id));
    };

    for (let step = 0; step < 16; step++) {
      const { rows } = await b.db.query<{ identifier: string; is_deleted: boolean }>("SELECT identifier, is_deleted FROM resources");
      const active = rows.filter((r) => !r.is_deleted).map((r) => r.identifier);
      const gone = rows.filter((r) => r.is_deleted).map((r) => r.identifier);
      const pick = (xs: string[]) => xs[rand(xs.length)] as string;
      const op = rand(4);
      let changed = 0;
      try {
        if (op === 0 && active.length > 1) changed = (await b.store.update(LOCAL_CALLER, [[pick(active), { parentIdentifier: pick(active) }]])).count;
        else if (op === 1 && active.length > 0) changed = (await b.store.delete(LOCAL_CALLER, [pick(active)], { cascade: rand(2) === 0 })).count;
        else if (op === 2 && gone.length > 0) changed = (await b.store.restore(LOCAL_CALLER, [pick(gone)], { cascade: rand(2) === 0 })).count;
        else if (active.length > 0) changed = (await b.store.update(LOCAL_CALLER, [[pick(active), { parentIdentifier: null }]])).count;
      } catch {
        // a refused move (cycle, own parent) changes nothing; the check still runs
      }
      if (b.kind === "postgres") expect(await fresh(b)).toBe(changed === 0);
      await check(`step ${step}, stale`);
      if (b.kind === "postgres") {
        await refreshLineageView(b.db);
        expect(await isLineageViewFresh(b.db)).toBe(true);
        await check(`step ${step}, fresh`);
      }
    }
  });
});
