// The feed keeps its promise (docs/events.md), each test named after a failure it
// had: a write that changed nothing woke every watcher; a sparse catch-up
// went silent while it scanned; a large commit was one message too big for
// default gRPC clients; every stream read every commit on its own, without
// bound; one refused LISTEN failed every later watch until a restart.
import { Code, ConnectError } from "@connectrpc/connect";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  beforeStamp,
  createEventFeed,
  createNotifications,
  createResourceStore,
  EVENTS_CHANNEL,
  migrate,
  openDatabase,
  readHistoryPage,
  type Db,
  type EventFeed,
  type EventMessage,
} from "../../src/store/index.js";
import { describeBackends, uid } from "../store/backends.js";
import { ds, study } from "../store/helpers.js";
import { ADMIN_URL, createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

const pgOk = await postgresReachable();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Reads a stream until `until` says so (or the time is up, which fails). */
async function collect(
  stream: AsyncGenerator<EventMessage>,
  until: (m: EventMessage, all: EventMessage[]) => boolean,
  ms = 20_000,
): Promise<EventMessage[]> {
  const out: EventMessage[] = [];
  const deadline = Date.now() + ms;
  for (;;) {
    const next = await Promise.race([stream.next(), sleep(deadline - Date.now()).then(() => "timeout" as const)]);
    if (next === "timeout") throw new Error(`stream did not get there in ${ms} ms (${out.length} messages)`);
    if (next.done === true) return out;
    out.push(next.value);
    if (until(next.value, out)) return out;
  }
}

describeBackends("the feed keeps its promise", (backend) => {
  it("an empty create, a delete of nothing and an update to the same values notify no one and commit no event", async () => {
    const b = backend();
    const r = uid("noop");
    await b.store.create(LOCAL_CALLER, [ds(r)]);
    let notified = 0;
    const listener = await b.db.listen!(EVENTS_CHANNEL, { onNotify: () => (notified += 1), onLost: () => {} });
    try {
      const before = (await b.store.create(LOCAL_CALLER, [ds(`${r}-mark`)])).at;
      // The mark's own notification arrives.
      for (let i = 0; i < 100 && notified === 0; i++) await sleep(20);
      expect(notified).toBe(1);
      expect((await b.store.create(LOCAL_CALLER, [])).count).toBe(0);
      expect((await b.store.delete(LOCAL_CALLER, [`${r}-nothing-here`])).count).toBe(0);
      expect((await b.store.delete(LOCAL_CALLER, [])).count).toBe(0);
      expect((await b.store.update(LOCAL_CALLER, [[r, { payload: { name: `name of ${r}` } }]])).count).toBe(0);
      await sleep(300);
      expect(notified).toBe(1);
      const page = await readHistoryPage(b.db, ALL_GRANTS, before, 1000);
      expect(page.events).toEqual([]);
      // A real write still wakes.
      await b.store.create(LOCAL_CALLER, [ds(`${r}-real`)]);
      for (let i = 0; i < 100 && notified === 1; i++) await sleep(20);
      expect(notified).toBe(2);
    } finally {
      await listener.close();
    }
  });

  it("a commit larger than the message limit is split; resuming from a partial message's at resends the whole commit", async () => {
    const b = backend();
    const feed = createEventFeed({ db: b.db, maxMessageBytes: 2048 });
    const r = uid("split");
    try {
      const since = (await b.store.create(LOCAL_CALLER, [ds(r)])).at;
      const big = Array.from({ length: 60 }, (_, i) =>
        study(`${r}-${String(i).padStart(3, "0")}`, r, { payload: { modality: "CT", description: "d".repeat(100) } }),
      );
      const { at } = await b.store.create(LOCAL_CALLER, big);
      const msgs = await collect(
        feed.watch({ grants: ALL_GRANTS, since, heartbeatMs: 60_000, includeResources: true }),
        (m) => m.at >= at,
      );
      const pieces = msgs.filter((m) => m.events.length > 0);
      expect(pieces.length).toBeGreaterThan(2);
      for (const m of pieces.slice(0, -1)) {
        expect(m.partial).toBe(true);
        expect(m.at).toBe(beforeStamp(at));
        expect(m.at < at && m.at >= since).toBe(true);
      }
      expect(pieces.at(-1)?.partial).toBeUndefined();
      expect(pieces.at(-1)?.at).toBe(at);
      expect(pieces.flatMap((m) => m.events.map((e) => e.identifier))).toEqual(big.map((x) => x.identifier));
      for (const m of pieces) expect(JSON.stringify(m.events).length).toBeLessThan(2048);
      // Resume from the second partial message: the whole commit again, from its first event.
      const again = await collect(
        feed.watch({ grants: ALL_GRANTS, since: pieces[1]!.at, heartbeatMs: 60_000 }),
        (m) => m.at >= at,
      );
      expect(again.flatMap((m) => m.events.map((e) => e.identifier))).toEqual(big.map((x) => x.identifier));
      // Every event says who wrote it (the version's actor).
      expect(new Set(again.flatMap((m) => m.events.map((e) => e.actor)))).toEqual(new Set(["local"]));
    } finally {
      await feed.close();
    }
  });

  it("MAX_WATCH_STREAMS: one stream more is resource_exhausted, and a closed one frees its place", async () => {
    const b = backend();
    const feed = createEventFeed({ db: b.db, maxStreams: 2 });
    try {
      const s1 = feed.watch({ grants: ALL_GRANTS, heartbeatMs: 60_000 });
      const s2 = feed.watch({ grants: ALL_GRANTS, heartbeatMs: 60_000 });
      await s1.next();
      await s2.next();
      const s3 = feed.watch({ grants: ALL_GRANTS, heartbeatMs: 60_000 });
      const err = await s3.next().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(ConnectError.from(err).code).toBe(Code.ResourceExhausted);
      await s1.return(undefined);
      expect(feed.openStreams).toBe(1);
      const s4 = feed.watch({ grants: ALL_GRANTS, heartbeatMs: 60_000 });
      expect((await s4.next()).done).toBe(false);
      await s4.return(undefined);
      await s2.return(undefined);
    } finally {
      await feed.close();
    }
  });
});

describe.skipIf(!pgOk)("the feed keeps its promise on PostgreSQL", () => {
  let tdb: TestDatabase;
  let db: Db;
  beforeAll(async () => {
    tdb = await createTestDatabase();
    db = await openDatabase({ databaseUrl: tdb.url, poolSize: 8 });
    await migrate(db);
  });
  afterAll(async () => {
    await db?.close();
    await tdb?.drop();
  });

  it("a filtered catch-up over 200,000 versions with no match still sends watermarks and finishes", async () => {
    const store = createResourceStore(db);
    const since = (await store.create(LOCAL_CALLER, [ds("scan-start")])).at;
    // 200,000 versions, one commit each (stamps a microsecond apart), none a study.
    await db.transaction(async (tx) => {
      await tx.query(
        `WITH c AS (SELECT last FROM clock)
         INSERT INTO resources (identifier, payload_type, parent_identifier, license, access_level, derived_from, payload,
                                created_at, updated_at, version, is_deleted, deleted_by, actor)
         SELECT 'scan-' || i, 'datasource', NULL, NULL, 'internal', '{}', jsonb_build_object('name', 'n' || i),
                c.last + i * interval '1 microsecond', c.last + i * interval '1 microsecond', 1, false, NULL, 'test'
           FROM c, generate_series(1, 200000) AS i`,
      );
      await tx.query(`UPDATE clock SET last = last + 200001 * interval '1 microsecond'`);
    });
    const end = (await store.create(LOCAL_CALLER, [ds("scan-end")])).at;
    const heartbeatMs = 100;
    const feed = createEventFeed({ db, pageSize: 1000 });
    try {
      const started = Date.now();
      const stamps: number[] = [started];
      const msgs = await collect(
        feed.watch({ grants: ALL_GRANTS, since, heartbeatMs, payloadTypes: ["study"] }),
        (m) => {
          stamps.push(Date.now());
          return m.at >= end;
        },
        120_000,
      );
      const gaps = stamps.slice(1).map((t, i) => t - stamps[i]!);
      console.log(`scan: ${msgs.length} messages in ${Date.now() - started} ms, largest gap ${Math.max(...gaps)} ms`);
      expect(msgs.every((m) => m.events.length === 0)).toBe(true);
      // Watermarks during the scan, not one heartbeat after it: each a point scanned so far.
      const during = msgs.filter((m) => m.at < end);
      expect(during.length).toBeGreaterThanOrEqual(3);
      for (let i = 1; i < msgs.length; i++) expect(msgs[i]!.at > msgs[i - 1]!.at).toBe(true);
      // The first message within a heartbeat (plus one page), and never a gap longer than that.
      expect(Math.max(...gaps)).toBeLessThan(heartbeatMs + 1500);
      // Resuming from a watermark skips what was scanned: the rest is shorter.
      const mid = during[Math.floor(during.length / 2)]!.at;
      const page = await readHistoryPage(db, ALL_GRANTS, mid, 1_000_000, { payloadTypes: ["datasource"] });
      expect(page.events.length).toBeLessThan(200_000);
      expect(page.events.every((e) => e.at > mid)).toBe(true);
    } finally {
      await feed.close();
    }
  }, 180_000);

  it("500 open streams and a writer: the database sees one history read per commit, not 500", async () => {
    let historyReads = 0;
    const counting = new Proxy(db, {
      get(target, prop, receiver) {
        if (prop === "query") {
          return (sql: string, params?: readonly unknown[]) => {
            if (sql.includes("resource_history")) historyReads += 1;
            return target.query(sql, params);
          };
        }
        return Reflect.get(target, prop, receiver) as unknown;
      },
    });
    const notifications = createNotifications(db);
    const feed = createEventFeed({ db: counting, notifications });
    const store = createResourceStore(db);
    const root = uid("root");
    await store.create(LOCAL_CALLER, [ds(root)]);
    // Five kinds of stream: all, studies only, datasources only, under root, all with resources.
    const kinds = [
      {},
      { payloadTypes: ["study"] },
      { payloadTypes: ["datasource"] },
      { rootIdentifier: root },
      { includeResources: true },
    ] as const;
    const ac = new AbortController();
    const got: string[][] = [];
    const firsts: Promise<void>[] = [];
    for (let i = 0; i < 500; i++) {
      const mine: string[] = [];
      got.push(mine);
      const stream = feed.watch({
        grants: ALL_GRANTS,
        heartbeatMs: 60_000,
        signal: ac.signal,
        ...kinds[i % kinds.length],
      });
      let first!: () => void;
      firsts.push(new Promise((r) => (first = r)));
      void (async () => {
        for await (const m of stream) {
          first();
          for (const e of m.events) mine.push(`${e.identifier}:${e.version}:${e.resource !== undefined}`);
        }
      })();
    }
    try {
      await Promise.all(firsts);
      await sleep(500);
      expect(feed.openStreams).toBe(500);
      historyReads = 0;
      const commits = 10;
      const expected: string[][] = kinds.map(() => []);
      for (let c = 0; c < commits; c++) {
        const items = c % 2 === 0 ? [study(`${root}-s${c}`, root)] : [ds(`${root}-d${c}`)];
        await store.create(LOCAL_CALLER, items);
        const id = items[0]!.identifier;
        const isStudy = c % 2 === 0;
        expected[0]!.push(`${id}:1:false`);
        if (isStudy) expected[1]!.push(`${id}:1:false`);
        else expected[2]!.push(`${id}:1:false`);
        if (isStudy) expected[3]!.push(`${id}:1:false`);
        expected[4]!.push(`${id}:1:true`);
        // Every stream has it before the next commit.
        const t0 = Date.now();
        while (got.some((g, i) => g.length < expected[i % kinds.length]!.length)) {
          if (Date.now() - t0 > 10_000) throw new Error(`commit ${c} not delivered to every stream in 10 s`);
          await sleep(10);
        }
      }
      console.log(`${historyReads} history reads for ${commits} commits and 500 streams`);
      // Two shared readers (with and without resources), one read per commit each, and a little slack for coalesced wake-ups.
      expect(historyReads).toBeLessThanOrEqual(commits * 2 * 2);
      got.forEach((g, i) => expect(g).toEqual(expected[i % kinds.length]));
    } finally {
      ac.abort();
      await feed.close();
      await notifications.close();
    }
  }, 120_000);

  it("LISTEN refused at first (the role's connections exhausted) and restored while streams keep delivering", async () => {
    const role = `feed_listen_${Math.random().toString(36).slice(2, 8)}`;
    const admin = new pg.Client({ connectionString: ADMIN_URL });
    await admin.connect();
    await admin.query(`CREATE ROLE ${role} LOGIN CONNECTION LIMIT 1`);
    const limitedUrl = new URL(tdb.url);
    limitedUrl.username = role;
    // The one connection the role may have, taken: LISTEN is refused ("too many connections for role").
    const blocker = new pg.Client({ connectionString: limitedUrl.toString() });
    await blocker.connect();
    // Opening a pool connects nothing; only its listen() is used.
    const limited = await openDatabase({ databaseUrl: limitedUrl.toString(), poolSize: 1 });
    const listenDb = new Proxy(db, {
      get(target, prop, receiver) {
        if (prop === "listen") return limited.listen!.bind(limited);
        return Reflect.get(target, prop, receiver) as unknown;
      },
    });
    const errors: unknown[] = [];
    const notifications = createNotifications(listenDb, {
      reconnectMs: 200,
      maxReconnectMs: 400,
      onError: (e) => errors.push(e),
    });
    const pollMs = 300;
    let feed: EventFeed | undefined = createEventFeed({ db: listenDb, notifications, pollMs });
    const store = createResourceStore(db);
    const ac = new AbortController();
    try {
      const arrivals = new Map<string, number>();
      const streams = [0, 1, 2].map(() => feed!.watch({ grants: ALL_GRANTS, heartbeatMs: 60_000, signal: ac.signal }));
      // Every watch opens although LISTEN is refused (it used to fail internal, and every later one too).
      for (const s of streams) expect((await s.next()).done).toBe(false);
      // The first LISTEN runs beside the watches; it is refused.
      for (let i = 0; i < 250 && errors.length === 0; i++) await sleep(20);
      expect(errors.length).toBeGreaterThan(0);
      expect(notifications.listening(EVENTS_CHANNEL)).toBe(false);
      for (const s of streams) {
        void (async () => {
          for await (const m of s)
            for (const e of m.events) if (!arrivals.has(`${e.identifier}`)) arrivals.set(e.identifier, Date.now());
        })();
      }
      /** Commits one resource and returns how long until the streams had it. */
      const delay = async (id: string): Promise<number> => {
        const t0 = Date.now();
        await store.create(LOCAL_CALLER, [ds(id)]);
        while (!arrivals.has(id)) {
          if (Date.now() - t0 > 10_000) throw new Error(`${id} not delivered in 10 s`);
          await sleep(5);
        }
        return arrivals.get(id)! - t0;
      };
      // Meanwhile the streams poll.
      const polled = [await delay("listen-down-1"), await delay("listen-down-2")];
      expect(Math.max(...polled)).toBeLessThan(pollMs + 1000);
      // Connections freed: the hub listens again within its backoff.
      await blocker.end();
      const t0 = Date.now();
      while (!notifications.listening(EVENTS_CHANNEL)) {
        if (Date.now() - t0 > 5000) throw new Error("LISTEN not restored within 5 s");
        await sleep(20);
      }
      const woken = [await delay("listen-up-1"), await delay("listen-up-2")];
      expect(Math.max(...woken)).toBeLessThan(1000);
      console.log(
        `delivery while LISTEN was refused: ${polled.join(", ")} ms; after it was restored: ${woken.join(", ")} ms`,
      );
      // A later watch opens too.
      const later = feed.watch({ grants: ALL_GRANTS, heartbeatMs: 60_000, signal: ac.signal });
      expect((await later.next()).done).toBe(false);
    } finally {
      ac.abort();
      await feed.close();
      feed = undefined;
      await notifications.close();
      await limited.close();
      await blocker.end().catch(() => {});
      await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
      await admin.query(`DROP ROLE ${role}`).catch(() => {});
      await admin.end();
    }
  }, 60_000);
});
