// The change feed over the store, on both backends: kinds from consecutive
// versions, whole commits in commit order, `since` exclusive, replay,
// filters (root as the tree was at each event), heartbeats, wake-ups.
import { expect, it } from "vitest";
import {
  createEventFeed,
  createNotifications,
  type Notifications,
  readHistoryPage,
  type EventMessage,
  type ResourceEvent,
} from "../../src/store/index.js";
import { describeBackends, uid } from "../store/backends.js";
import { ds, study } from "../store/helpers.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

const brief = (e: ResourceEvent) => [e.identifier, e.kind, e.version];

async function all(
  b: { db: Parameters<typeof readHistoryPage>[0] },
  since: string | null,
  filter = {},
  limit = 1000,
): Promise<ResourceEvent[]> {
  const out: ResourceEvent[] = [];
  let point = since;
  for (;;) {
    const page = await readHistoryPage(b.db, ALL_GRANTS, point, limit, filter);
    out.push(...page.events);
    point = page.upto;
    if (!page.more) return out;
  }
}

describeBackends("change feed history", (backend) => {
  it("derives kinds from consecutive versions, one stamp per commit, since exclusive", async () => {
    const b = backend();
    const r = uid("r");
    const t0 = (await b.store.create(LOCAL_CALLER, [ds(r), study(`${r}a`, r), study(`${r}b`, `${r}a`)])).at;
    const t1 = (await b.store.update(LOCAL_CALLER, [[`${r}a`, { payload: { modality: "MR" } }]])).at;
    const t2 = (await b.store.delete(LOCAL_CALLER, [r])).at;
    const t3 = (await b.store.restore(LOCAL_CALLER, [r])).at;
    await b.store.delete(LOCAL_CALLER, [`${r}b`], { cascade: false });
    const t5 = (await b.store.create(LOCAL_CALLER, [study(`${r}b`, `${r}a`)])).at;
    const events = (await all(b, t0)).filter((e) => e.identifier.startsWith(r));
    expect(events.map(brief)).toEqual([
      [`${r}a`, "updated", 2],
      [r, "deleted", 2],
      [`${r}a`, "deleted", 3],
      [`${r}b`, "deleted", 2],
      [r, "restored", 3],
      [`${r}a`, "restored", 4],
      [`${r}b`, "restored", 3],
      [`${r}b`, "deleted", 4],
      [`${r}b`, "created", 5],
    ]);
    expect(events.filter((e) => e.at === t2).length).toBe(3);
    expect(events.filter((e) => e.at === t3).length).toBe(3);
    expect(events[0]?.at).toBe(t1);
    expect(events.at(-1)?.at).toBe(t5);
    // Before the first commit: the creates too.
    const replay = (await all(b, null)).filter((e) => e.identifier.startsWith(r));
    expect(replay.slice(0, 3).map(brief)).toEqual([
      [r, "created", 1],
      [`${r}a`, "created", 1],
      [`${r}b`, "created", 1],
    ]);
    expect(replay.slice(3)).toEqual(events);
  });

  it("pages end on commit boundaries whatever the page size", async () => {
    const b = backend();
    const p = uid("p");
    const start = (await b.store.create(LOCAL_CALLER, [ds(`${p}0`)])).at;
    for (let i = 1; i <= 5; i++) {
      await b.store.create(
        LOCAL_CALLER,
        Array.from({ length: i }, (_, j) => ds(`${p}${i}-${j}`)),
      );
    }
    const whole = await all(b, start);
    for (const limit of [1, 2, 3, 7]) {
      let point: string | null = start;
      const seen: ResourceEvent[] = [];
      for (;;) {
        const page = await readHistoryPage(b.db, ALL_GRANTS, point, limit, {});
        const stamps = new Set(page.events.map((e) => e.at));
        // A page holds every event of each commit it touches.
        for (const s of stamps)
          expect(page.events.filter((e) => e.at === s).length).toBe(whole.filter((e) => e.at === s).length);
        seen.push(...page.events);
        point = page.upto;
        if (!page.more) break;
      }
      expect(seen).toEqual(whole);
    }
  });

  it("a page that exactly fills its budget says there is no more (no empty read after a commit of page size)", async () => {
    const b = backend();
    const p = uid("x");
    const start = (await b.store.create(LOCAL_CALLER, [ds(`${p}0`)])).at;
    const three = (await b.store.create(LOCAL_CALLER, [ds(`${p}1`), ds(`${p}2`), ds(`${p}3`)])).at;
    // Exactly the budget: complete, and read up to the clock.
    const exact = await readHistoryPage(b.db, ALL_GRANTS, start, 3, {});
    expect(exact.events.map((e) => e.identifier)).toEqual([`${p}1`, `${p}2`, `${p}3`]);
    expect(exact.more).toBe(false);
    expect(exact.upto >= three).toBe(true);
    // One version past the budget in a later commit: the page ends at the commit before it, and says more.
    const four = (await b.store.create(LOCAL_CALLER, [ds(`${p}4`)])).at;
    const full = await readHistoryPage(b.db, ALL_GRANTS, start, 3, {});
    expect(full.events.map((e) => e.identifier)).toEqual([`${p}1`, `${p}2`, `${p}3`]);
    expect(full.more).toBe(true);
    expect(full.upto).toBe(three);
    const rest = await readHistoryPage(b.db, ALL_GRANTS, full.upto, 3, {});
    expect(rest.events.map((e) => e.identifier)).toEqual([`${p}4`]);
    expect(rest.more).toBe(false);
    expect(rest.upto >= four).toBe(true);
    // A commit past the budget is read whole, and may be followed by more.
    const whole = await readHistoryPage(b.db, ALL_GRANTS, start, 2, {});
    expect(whole.events.map((e) => e.identifier)).toEqual([`${p}1`, `${p}2`, `${p}3`]);
    expect(whole.more).toBe(true);
  });

  it("filters by payload type and by the subtree as it was at each event", async () => {
    const b = backend();
    const r = uid("f");
    const t0 = (
      await b.store.create(LOCAL_CALLER, [ds(r), ds(`${r}other`), study(`${r}s`, r), study(`${r}t`, `${r}s`)])
    ).at;
    await b.store.update(LOCAL_CALLER, [[`${r}t`, { payload: { modality: "MR" } }]]);
    // Moved out: this event is outside, and so is every later one.
    await b.store.update(LOCAL_CALLER, [[`${r}s`, { parentIdentifier: `${r}other` }]]);
    await b.store.update(LOCAL_CALLER, [[`${r}t`, { payload: { modality: "US" } }]]);
    await b.store.update(LOCAL_CALLER, [[`${r}other`, { payload: { name: "x" } }]]);
    const under = await all(b, t0, { rootIdentifier: r });
    expect(under.map(brief)).toEqual([[`${r}t`, "updated", 2]]);
    const fromStart = (await all(b, null, { rootIdentifier: r })).map(brief);
    expect(fromStart).toEqual([
      [r, "created", 1],
      [`${r}s`, "created", 1],
      [`${r}t`, "created", 1],
      [`${r}t`, "updated", 2],
    ]);
    const studies = (await all(b, t0, { payloadTypes: ["datasource"] })).filter((e) => e.identifier.startsWith(r));
    expect(studies.map(brief)).toEqual([[`${r}other`, "updated", 2]]);
    const withResource = await all(b, t0, { rootIdentifier: r, includeResources: true });
    expect(withResource[0]?.resource?.payload).toEqual({ modality: "MR" });
    expect(withResource[0]?.resource?.version).toBe(2);
  });

  it("a watch from now sees only new commits, wakes on a commit, and sends heartbeats while idle", async () => {
    const b = backend();
    const notifications = createNotifications(b.db);
    const feed = createEventFeed({ db: b.db, notifications });
    const w = uid("w");
    try {
      await b.store.create(LOCAL_CALLER, [ds(`${w}old`)]);
      const stream = feed.watch({ grants: ALL_GRANTS, heartbeatMs: 300 });
      // Heartbeat first (nothing new), at the read point.
      const hb = await stream.next();
      expect((hb.value as EventMessage).events).toEqual([]);
      const created = b.store.create(LOCAL_CALLER, [ds(`${w}new`), ds(`${w}new2`)]);
      let msg: EventMessage;
      do {
        msg = (await stream.next()).value as EventMessage;
      } while (msg.events.length === 0);
      const { at } = await created;
      expect(msg.at).toBe(at);
      expect(msg.events.map(brief)).toEqual([
        [`${w}new`, "created", 1],
        [`${w}new2`, "created", 1],
      ]);
      const after = (await stream.next()).value as EventMessage;
      expect(after.events).toEqual([]);
      expect(after.at >= at).toBe(true);
      await feed.close();
      expect((await stream.next()).done).toBe(true);
    } finally {
      await feed.close();
      await notifications.close();
    }
  });

  // The LISTEN of a feed's first watch is set up beside it: a commit notified
  // before it took effect, and not yet polled (polling stops once it
  // listens), waited for the next commit or heartbeat (seen under CI's load).
  it("a commit made while the first LISTEN is still being set up reaches the watch once it listens", async () => {
    const b = backend();
    let release!: () => void;
    const listeningNow = new Promise<void>((r) => (release = r));
    let live = false;
    const wakeUps: (() => void)[] = [];
    const slowToListen: Notifications = {
      async subscribe(_channel, onNotify) {
        wakeUps.push(onNotify);
        await listeningNow;
        live = true;
        // As the hub does once a channel listens (test/events/notifications.test.ts).
        onNotify();
        return () => Promise.resolve();
      },
      listening: () => live,
      close: () => Promise.resolve(),
    };
    // No poll and no heartbeat inside the test's time: only a read after the LISTEN delivers the commit.
    const feed = createEventFeed({ db: b.db, notifications: slowToListen, pollMs: 600_000 });
    const w = uid("ls");
    try {
      const stream = feed.watch({ grants: ALL_GRANTS, heartbeatMs: 600_000 });
      expect(((await stream.next()).value as EventMessage).events).toEqual([]);
      const waiting = stream.next();
      // Committed (and notified to no one) before the LISTEN takes effect.
      const { at } = await b.store.create(LOCAL_CALLER, [ds(`${w}a`)]);
      release();
      const msg = (await waiting).value as EventMessage;
      expect(msg.at).toBe(at);
      expect(msg.events.map(brief)).toEqual([[`${w}a`, "created", 1]]);
      expect(wakeUps).toHaveLength(1);
    } finally {
      await feed.close();
    }
  }, 20_000);

  it("streams without filters get the very same message objects of a commit (encoded once), a filtered stream its own", async () => {
    const b = backend();
    const notifications = createNotifications(b.db);
    const feed = createEventFeed({ db: b.db, notifications });
    const w = uid("sh");
    try {
      const streams = [
        feed.watch({ grants: ALL_GRANTS, heartbeatMs: 60_000 }),
        feed.watch({ grants: ALL_GRANTS, heartbeatMs: 60_000 }),
        feed.watch({ grants: ALL_GRANTS, heartbeatMs: 60_000, payloadTypes: ["datasource"] }),
      ];
      // The first message of each (nothing to send yet); asked for the next, each joins the tail and waits.
      for (const s of streams) expect(((await s.next()).value as EventMessage).events).toEqual([]);
      const waiting = streams.map((s) => s.next());
      await new Promise((r) => setTimeout(r, 300));
      const { at } = await b.store.create(LOCAL_CALLER, [ds(`${w}a`), ds(`${w}b`)]);
      const got: EventMessage[] = [];
      for (const [i, s] of streams.entries()) {
        let m = (await waiting[i])!.value as EventMessage;
        while (m.events.length === 0) m = (await s.next()).value as EventMessage;
        got.push(m);
      }
      for (const m of got)
        expect([m.at, m.events.map(brief)]).toEqual([
          at,
          [
            [`${w}a`, "created", 1],
            [`${w}b`, "created", 1],
          ],
        ]);
      expect(got[1]).toBe(got[0]);
      expect(got[2]).not.toBe(got[0]);
      for (const s of streams) await s.return(undefined);
    } finally {
      await feed.close();
      await notifications.close();
    }
  });
});
