// The feed counts what it reads and which streams leave their tail
// (EventFeed.stats(), shown on /metrics): in one full benchmark run every
// stream became ten times slower than the writer, which fits streams leaving
// the tail and each reading every commit on its own, and nothing in the
// service could say whether that happened.
//
// Exact counts need the tail to read only when the test says so: the feed
// gets a hand-driven wake-up hub instead of LISTEN (it says it listens, so the
// tails never poll), heartbeats are far off (a quiet stream never makes its
// tail read), and the test waits for the tail-read count each step implies
// before the next commit. A tail counts its read and hands the page to its
// streams in one synchronous step, so once the count is reached the page is
// queued (or the stream has left), and no read is in flight. Each wait is
// bounded: a count never reached fails the test.
import { afterEach, expect, it } from "vitest";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";
import {
  createEventFeed,
  type Db,
  type EventFeed,
  type EventFeedStats,
  type EventMessage,
  type Notifications,
} from "../../src/store/index.js";
import { describeBackends, uid } from "../store/backends.js";
import { ds, study } from "../store/helpers.js";

/** store/events.ts MAX_QUEUED_PAGES: unread pages a joined stream may hold before it leaves the tail. */
const MAX_QUEUED_PAGES = 8;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A wake-up hub the test drives: wake() is a notification; it always "listens", so nothing polls. */
function manualWakeups(): Notifications & { wake(): void } {
  const subscribers = new Set<() => void>();
  return {
    subscribe(_channel, onNotify) {
      subscribers.add(onNotify);
      return Promise.resolve(() => {
        subscribers.delete(onNotify);
        return Promise.resolve();
      });
    },
    listening: () => true,
    close: () => Promise.resolve(),
    wake() {
      for (const fn of [...subscribers]) fn();
    },
  };
}

/** Waits until the feed's stats satisfy `ok`; fails after 10 s, naming what was awaited. */
async function statsReach(feed: EventFeed, what: string, ok: (s: EventFeedStats) => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!ok(feed.stats())) {
    if (Date.now() > deadline) throw new Error(`stats never reached ${what}: ${JSON.stringify(feed.stats())}`);
    await sleep(2);
  }
}

/** Fails a pull that takes longer than 10 s. */
async function pull(next: Promise<IteratorResult<EventMessage>>): Promise<EventMessage> {
  const r = await Promise.race([next, sleep(10_000).then(() => "timeout" as const)]);
  if (r === "timeout") throw new Error("the stream sent nothing in 10 s");
  if (r.done === true) throw new Error("the stream ended");
  return r.value;
}

const ids = (m: EventMessage) => m.events.map((e) => e.identifier);

/** The database with `hook` run before each history read (a statement on resource_history): it may fail the read, or hold it. */
function beforeHistoryReads(db: Db, hook: () => Promise<void>): Db {
  return new Proxy(db, {
    get(target, prop, receiver) {
      if (prop === "query") {
        return async (sql: string, params?: readonly unknown[]) => {
          if (sql.includes("resource_history")) await hook();
          return target.query(sql, params);
        };
      }
      return Reflect.get(target, prop, receiver) as unknown;
    },
  });
}

describeBackends("the feed counts its reads and the streams that leave a tail", (backend) => {
  const feeds: EventFeed[] = [];
  afterEach(async () => {
    for (const f of feeds.splice(0)) await f.close();
  });

  it("a stream not pulled while more than MAX_QUEUED_PAGES commits come leaves the tail once, lagging, and reads the rest on its own", async () => {
    const b = backend();
    const hub = manualWakeups();
    // Two versions a page: single-version commits come one a page from the tail, two a page on the stream's own.
    const pageSize = 2;
    const feed = createEventFeed({ db: b.db, notifications: hub, pageSize });
    feeds.push(feed);
    const r = uid("stats");
    const commit = async (i: number) => {
      await b.store.create(LOCAL_CALLER, [ds(`${r}-${String(i).padStart(2, "0")}`)]);
      hub.wake();
    };
    const stream = feed.watch({ grants: ALL_GRANTS, heartbeatMs: 600_000 });
    const got: string[] = [];

    // Its first message: a watermark from its own first read (nothing to catch up on).
    expect((await pull(stream.next())).events).toEqual([]);
    expect(feed.stats()).toEqual({ tailReads: 0, streamReads: 1, leftTail: { lagging: 0, untagged: 0, error: 0 } });
    // Pulled again it joins the tail, which reads once at the join (an empty page), and waits.
    let pending = stream.next();
    let tailReads = 1;
    await statsReach(feed, `${tailReads} tail reads (the join)`, (s) => s.tailReads === tailReads);

    // Commit 1: one tail read, delivered to the waiting pull.
    await commit(1);
    tailReads += 1;
    got.push(...ids(await pull(pending)));
    expect(feed.stats().tailReads).toBe(tailReads);

    // Not pulled: commits 2..9 fill its queue (one page each); commit 10's page finds it full and it leaves.
    const last = 1 + MAX_QUEUED_PAGES + 6;
    for (let i = 2; i <= 1 + MAX_QUEUED_PAGES + 1; i++) {
      await commit(i);
      tailReads += 1;
      await statsReach(feed, `${tailReads} tail reads (commit ${i})`, (s) => s.tailReads === tailReads);
    }
    expect(feed.stats()).toEqual({ tailReads, streamReads: 1, leftTail: { lagging: 1, untagged: 0, error: 0 } });
    // Commits 11..15: nobody is joined, so the tail does not read (a wake-up with no member reads nothing, at once).
    for (let i = 1 + MAX_QUEUED_PAGES + 2; i <= last; i++) await commit(i);
    expect(feed.stats()).toEqual({ tailReads, streamReads: 1, leftTail: { lagging: 1, untagged: 0, error: 0 } });

    // Pulled to the end: the eight queued pages, then its own reads from where its queue ended (after commit 9).
    while (got.length < last) got.push(...ids(await pull(stream.next())));
    const expected = Array.from({ length: last }, (_, k) => `${r}-${String(k + 1).padStart(2, "0")}`);
    expect(got).toEqual(expected);
    // Commits 10..15 on its own, two a page: three pages, the last of which
    // (exactly full, with nothing after it) says there is no more.
    const ownPages = Math.ceil((last - (1 + MAX_QUEUED_PAGES)) / pageSize);
    expect(feed.stats()).toEqual({
      tailReads,
      streamReads: 1 + ownPages,
      leftTail: { lagging: 1, untagged: 0, error: 0 },
    });

    // Pulled again: no empty read of its own after that last page; it joins again (one tail read).
    pending = stream.next();
    tailReads += 1;
    await statsReach(feed, `${tailReads} tail reads (the second join)`, (s) => s.tailReads === tailReads);
    // And the next commit comes from the tail again.
    await commit(last + 1);
    tailReads += 1;
    got.push(...ids(await pull(pending)));
    expect(got).toEqual([...expected, `${r}-${last + 1}`]);
    const end = { tailReads, streamReads: 1 + ownPages, leftTail: { lagging: 1, untagged: 0, error: 0 } };
    expect(feed.stats()).toEqual(end);
    expect(end).toEqual({ tailReads: 13, streamReads: 4, leftTail: { lagging: 1, untagged: 0, error: 0 } });

    // A stream that ends is not a departure.
    expect(feed.openStreams).toBe(1);
    await stream.return(undefined);
    expect(feed.openStreams).toBe(0);
    expect(feed.stats()).toEqual(end);
  });

  it("a tail read that fails sends its stream to read on its own: one `error` departure", async () => {
    const b = backend();
    const hub = manualWakeups();
    let failNext = false;
    const failing = beforeHistoryReads(b.db, () => {
      if (!failNext) return Promise.resolve();
      failNext = false;
      return Promise.reject(new Error("the tail's read failed (test)"));
    });
    const feed = createEventFeed({ db: failing, notifications: hub, pageSize: 2 });
    feeds.push(feed);
    const r = uid("fail");
    const stream = feed.watch({ grants: ALL_GRANTS, heartbeatMs: 600_000 });
    expect((await pull(stream.next())).events).toEqual([]);
    const pending = stream.next();
    await statsReach(feed, "1 tail read (the join)", (s) => s.tailReads === 1);
    // The next history read is the tail's (the stream waits on its queue): it fails.
    failNext = true;
    await b.store.create(LOCAL_CALLER, [ds(r)]);
    hub.wake();
    // The stream reads the commit on its own.
    expect(ids(await pull(pending))).toEqual([r]);
    expect(failNext).toBe(false);
    expect(feed.stats()).toEqual({ tailReads: 1, streamReads: 2, leftTail: { lagging: 0, untagged: 0, error: 1 } });
    await stream.return(undefined);
  });

  it("a subtree stream that joins while its tail reads a page not tagged for its root leaves once, untagged, and still gets every event under its root", async () => {
    const b = backend();
    const hub = manualWakeups();
    // The tail's next history read waits until the test lets it go.
    let holdNext = false;
    const gate: { open?: () => void } = {};
    const holding = beforeHistoryReads(b.db, async () => {
      if (!holdNext) return;
      holdNext = false;
      await new Promise<void>((go) => (gate.open = go));
    });
    const feed = createEventFeed({ db: holding, notifications: hub, pageSize: 100 });
    feeds.push(feed);
    const r = uid("untagged");
    await b.store.create(LOCAL_CALLER, [ds(`${r}-root`)]);

    // Stream A, no root: joins the tail.
    const a = feed.watch({ grants: ALL_GRANTS, heartbeatMs: 600_000 });
    expect((await pull(a.next())).events).toEqual([]);
    const pendingA = a.next();
    await statsReach(feed, "1 tail read (A's join)", (s) => s.tailReads === 1);

    // A commit outside the root; the tail's read of it is held, tagged for no root.
    holdNext = true;
    await b.store.create(LOCAL_CALLER, [ds(`${r}-other`)]);
    hub.wake();
    const deadline = Date.now() + 10_000;
    while (gate.open === undefined) {
      if (Date.now() > deadline) throw new Error("the tail never read");
      await sleep(2);
    }

    // Stream B, under the root: reads on its own from now, then joins the tail mid-read.
    const bStream = feed.watch({ grants: ALL_GRANTS, heartbeatMs: 600_000, rootIdentifier: `${r}-root` });
    expect((await pull(bStream.next())).events).toEqual([]);
    // Pulled again it joins at once: the generator runs from its yield to the
    // join without awaiting, and the tail is behind it (its read is held).
    const pendingB = bStream.next();
    expect(feed.stats().leftTail).toEqual({ lagging: 0, untagged: 0, error: 0 });

    // A commit under the root, while the read is still held: the held read's
    // window takes it in, but its tags (taken when it started) lack B's root.
    await b.store.create(LOCAL_CALLER, [study(`${r}-study`, `${r}-root`)]);
    hub.wake();

    // The held page comes back: B leaves, untagged, and reads the commit under its root on its own; A gets both.
    gate.open();
    const gotA: string[] = [];
    while (gotA.length < 2) gotA.push(...ids(await pull(gotA.length === 0 ? pendingA : a.next())));
    expect(gotA).toEqual([`${r}-other`, `${r}-study`]);
    expect(ids(await pull(pendingB))).toEqual([`${r}-study`]);
    expect(feed.stats().leftTail).toEqual({ lagging: 0, untagged: 1, error: 0 });
    await a.return(undefined);
    await bStream.return(undefined);
  });
});
