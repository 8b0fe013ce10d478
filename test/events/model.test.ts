// Model-based, on PostgreSQL: two service processes on one database, each
// writing random batches (creates, updates, deletes, cascades, restores)
// through its own store and pool, while watchers on either process
// disconnect at random points and resume with the last `at` they got. Every
// watcher's events must equal the model's log: no gap, no duplicate, commit
// order, whole commits per message. Messages are small
// (EVENTS_MAX_MESSAGE_BYTES at its minimum), so larger commits come split
// into partial messages; a watcher resumes from the `at` of whatever message
// it got last, partial ones included, and drops the pieces of a commit it did
// not see end (the commit comes again whole). Also: a commit by one process
// wakes a watcher on the other long before any heartbeat would.
//
// And the same model through the three clients of the feed, which share one
// resume implementation (src/client/watch.ts): the client library's
// watch() over gRPC, `resource-store watch` (runWatch, its NDJSON lines)
// over Connect, and the explorer's live panel's code path (watchEvents over
// connect-web's fetch transport, JSON, as ui/src/feed.ts) — each behind a
// TCP proxy cut at random moments while the writers run, every run with a
// commit large enough to be split, and each stream broken once right after
// a partial message.
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import type { WatchResponse } from "../../gen/resourcestore/type/v1/event_pb.js";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { createConnectTransport } from "@connectrpc/connect-web";
import { createResourceStoreClient } from "../../src/client/index.js";
import { watchEvents } from "../../src/client/browser.js";
import { runWatch } from "../../src/cli/watch.js";
import { startTcpProxy, type TcpProxy } from "../reliability/tcp-proxy.js";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";
import { createResourceStore, type ResourcePatch, type ResourceStore } from "../../src/store/index.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { apply, type Batch, type State } from "../store/model.js";
import { LOCAL_CALLER } from "../../src/access/index.js";

const pgOk = await postgresReachable();

const POOL = ["a", "b", "c", "d", "e"];
const id = fc.constantFrom(...POOL);
const parent = fc.option(id, { nil: null, freq: 3 });
const batchArb: fc.Arbitrary<Batch> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant("create" as const),
      items: fc.array(fc.record({ id, parent, name: fc.constantFrom("n1", "n2") }), { maxLength: 3 }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant("update" as const),
      entries: fc.uniqueArray(
        fc.record({ id, parent, name: fc.constantFrom("n1", "n3"), isDeleted: fc.boolean() }, { requiredKeys: ["id"] }),
        { minLength: 1, maxLength: 3, selector: (e) => e.id },
      ),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("delete" as const),
      ids: fc.array(id, { maxLength: 2 }),
      cascade: fc.boolean(),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("restore" as const),
      ids: fc.array(id, { maxLength: 2 }),
      cascade: fc.boolean(),
    }),
  },
);

/** Runs a batch; the stamp when it committed. */
async function run(store: ResourceStore, p: string, batch: Batch): Promise<string | undefined> {
  const q = (x: string | null | undefined) => (x === null || x === undefined ? x : `${p}${x}`);
  try {
    switch (batch.kind) {
      case "create":
        return (
          await store.create(
            LOCAL_CALLER,
            batch.items.map((i) => ({
              identifier: `${p}${i.id}`,
              payloadType: "datasource",
              parentIdentifier: q(i.parent) ?? null,
              payload: { name: i.name },
            })),
          )
        ).at;
      case "update":
        return (
          await store.update(
            LOCAL_CALLER,
            batch.entries.map((e) => {
              const patch: ResourcePatch = {};
              if (e.parent !== undefined) patch.parentIdentifier = q(e.parent) ?? null;
              if (e.name !== undefined) patch.payload = { name: e.name };
              if (e.isDeleted !== undefined) patch.isDeleted = e.isDeleted;
              return [`${p}${e.id}`, patch] as const;
            }),
          )
        ).at;
      case "delete":
        return (
          await store.delete(
            LOCAL_CALLER,
            batch.ids.map((i) => `${p}${i}`),
            { cascade: batch.cascade },
          )
        ).at;
      case "restore":
        return (
          await store.restore(
            LOCAL_CALLER,
            batch.ids.map((i) => `${p}${i}`),
            { cascade: batch.cascade },
          )
        ).at;
    }
  } catch (err) {
    if (err instanceof ConnectError) return undefined;
    throw err;
  }
}

type LogEvent = [at: string, identifier: string, kind: string, version: number];

/** Runs the batches through the store (identifiers prefixed by p) and appends the events the model predicts for each commit to log; the last commit's stamp. */
async function writeBatches(
  store: ResourceStore,
  p: string,
  batches: readonly Batch[],
  log: LogEvent[],
): Promise<string | undefined> {
  let state: State = new Map();
  let last: string | undefined;
  for (const batch of batches) {
    const at = await run(store, p, batch);
    if (at === undefined) continue;
    const predicted = apply(state, batch, at);
    log.push(...modelEvents(p, state, predicted.next, at));
    state = predicted.next;
    last = at;
  }
  return last;
}

/** The model's events of one committed batch: every row whose version moved, with its kind. */
function modelEvents(p: string, before: State, after: State, at: string): LogEvent[] {
  const out: LogEvent[] = [];
  for (const [key, row] of after) {
    const prev = before.get(key);
    if (prev !== undefined && prev.version === row.version) continue;
    const kind =
      prev === undefined
        ? "created"
        : row.deleted
          ? "deleted"
          : prev.deleted
            ? row.createdAt === at
              ? "created"
              : "restored"
            : "updated";
    out.push([at, `${p}${key}`, kind, row.version]);
  }
  return out;
}

const byCommitThenId = (a: LogEvent, b: LogEvent) =>
  a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0;

describe.skipIf(!pgOk)("the feed against a model, two processes on one PostgreSQL", () => {
  let db: TestDatabase;
  let servers: TestServer[] = [];
  beforeAll(async () => {
    db = await createTestDatabase();
    servers = await Promise.all(
      [0, 1].map(() =>
        startTestServer({
          DATABASE_URL: db.url,
          EVENTS_HEARTBEAT_MS: "100",
          EVENTS_PAGE_SIZE: "7",
          EVENTS_MAX_MESSAGE_BYTES: "1024",
        }),
      ),
    );
  }, 60_000);
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close()));
    await db?.drop();
  });

  const clientOf = (i: number) => createClient(EventService, createGrpcTransport({ baseUrl: servers[i % 2]!.url }));

  /** The read point now: the at of a fresh watch's first message. */
  async function now(): Promise<string> {
    for await (const m of clientOf(0).watch({})) return m.at;
    throw new Error("no first message");
  }

  /** Reads until `final()` is set and reached, hopping between processes and resuming from its last at. */
  async function watcher(
    since: string,
    stops: number[],
    final: () => string | undefined,
  ): Promise<{ events: LogEvent[]; messages: LogEvent[][]; partials: number }> {
    const messages: LogEvent[][] = [];
    let point = since;
    let partials = 0;
    for (let hop = 0; ; hop++) {
      const ac = new AbortController();
      const stopAfter = stops[hop % stops.length] ?? 1;
      let n = 0;
      // Pieces of a split commit, kept until its last piece; a reconnect drops them (they come again).
      let pending: LogEvent[] = [];
      try {
        for await (const m of clientOf(hop).watch(
          { since: point, includeResources: hop % 2 === 1 },
          { signal: ac.signal },
        )) {
          const events = m.events.map((e): LogEvent => [e.at, e.identifier, e.kind, Number(e.version)]);
          if (m.partial) {
            partials += 1;
            // A piece: one commit, and an at just before it, so resuming from it sends the commit again.
            expect(new Set(events.map((e) => e[0])).size).toBe(1);
            expect(m.at < events[0]![0]).toBe(true);
            pending.push(...events);
          } else if (events.length > 0) {
            messages.push([...pending, ...events]);
            pending = [];
          }
          point = m.at;
          const end = final();
          if (end !== undefined && point >= end) return { events: messages.flat(), messages, partials };
          if (++n >= stopAfter) break;
        }
      } catch (err) {
        if (ConnectError.from(err).code !== Code.Canceled) throw err;
      } finally {
        ac.abort();
      }
    }
  }

  it("every resuming watcher's events equal the model's log, across split commits", async () => {
    let splits = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(batchArb, { minLength: 1, maxLength: 8 }),
        fc.array(batchArb, { minLength: 1, maxLength: 8 }),
        fc.array(fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 5 }), {
          minLength: 1,
          maxLength: 3,
        }),
        async (batchesA, batchesB, stopsPerWatcher) => {
          const run0 = `m${Math.random().toString(36).slice(2, 8)}`;
          const since = await now();
          const end: { at?: string } = {};
          const watchers = stopsPerWatcher.map((stops) => watcher(since, stops, () => end.at));
          const log: LogEvent[] = [];
          // Two writers at once, each on its own process's pool, each with its own identifiers.
          const writers = [batchesA, batchesB].map((batches, w) =>
            writeBatches(createResourceStore(servers[w]!.app.db), `${run0}${w}-`, batches, log),
          );
          const lasts = (await Promise.all(writers)).filter((x): x is string => x !== undefined);
          // Nothing committed at all: wait until the watchers are past a fresh read point.
          end.at = lasts.length > 0 ? lasts.sort().at(-1) : await now();
          log.sort(byCommitThenId);
          for (const { events, messages, partials } of await Promise.all(watchers)) {
            splits += partials;
            const mine = events.filter((e) => e[1].startsWith(run0));
            expect(mine).toEqual(log);
            // Whole commits: every stamp of a message has all its events there.
            for (const m of messages)
              for (const at of new Set(m.map((e) => e[0])))
                expect(m.filter((e) => e[0] === at).length).toBe(events.filter((e) => e[0] === at).length);
          }
        },
      ),
      { numRuns: Number(process.env.EVENTS_MODEL_RUNS ?? 15) },
    );
    // Whether the random runs met a split commit is chance (one in fifteen runs
    // of CI met none): splitting itself is asserted deterministically in
    // promise.test.ts, large-commit.test.ts and test/wire/client-resume.test.ts.
    // The count is printed so a run shows what it covered.
    console.log(`events model: ${splits} partial messages met`);
  }, 240_000);

  it("replays the full history from before the first commit, across pages", async () => {
    const all: LogEvent[] = [];
    let point = "2000-01-01T00:00:00Z";
    const end = await now();
    for await (const m of clientOf(1).watch({ since: point })) {
      all.push(...m.events.map((e): LogEvent => [e.at, e.identifier, e.kind, Number(e.version)]));
      point = m.at;
      if (point >= end) break;
    }
    const { rows } = await servers[0]!.app.db.query<{ n: string }>("SELECT count(*)::text AS n FROM resource_history");
    expect(all.length).toBe(Number(rows[0]?.n));
    expect(new Set(all.map((e) => `${e[1]}@${e[3]}`)).size).toBe(all.length);
    expect([...all].sort(byCommitThenId)).toEqual(all);
  });
});

describe.skipIf(!pgOk)("a commit by another process wakes a watcher", () => {
  let db: TestDatabase;
  let servers: TestServer[] = [];
  beforeAll(async () => {
    db = await createTestDatabase();
    // Heartbeats far off: only a notification can bring the event in time.
    servers = await Promise.all(
      [0, 1].map(() => startTestServer({ DATABASE_URL: db.url, EVENTS_HEARTBEAT_MS: "600000" })),
    );
  }, 60_000);
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close()));
    await db?.drop();
  });

  it("through LISTEN/NOTIFY, not a heartbeat", async () => {
    const client = createClient(EventService, createGrpcTransport({ baseUrl: servers[0]!.url }));
    const ac = new AbortController();
    const stream = client.watch({}, { signal: ac.signal })[Symbol.asyncIterator]();
    expect((await stream.next()).value?.events).toEqual([]);
    const store = createResourceStore(servers[1]!.app.db);
    const { at } = await store.create(LOCAL_CALLER, [
      { identifier: "woken", payloadType: "datasource", payload: { name: "w" } },
    ]);
    const next = await stream.next();
    expect(next.value?.at).toBe(at);
    expect(next.value?.events.map((e: { identifier: string }) => e.identifier)).toEqual(["woken"]);
    ac.abort();
  }, 20_000);
});

describe.skipIf(!pgOk)(
  "the feed against a model through the client library, the CLI and the explorer, with connections cut",
  () => {
    let db: TestDatabase;
    let servers: TestServer[] = [];
    let proxies: TcpProxy[] = [];
    beforeAll(async () => {
      db = await createTestDatabase();
      servers = await Promise.all(
        [0, 1].map(() =>
          startTestServer({
            DATABASE_URL: db.url,
            EVENTS_HEARTBEAT_MS: "100",
            EVENTS_PAGE_SIZE: "7",
            EVENTS_MAX_MESSAGE_BYTES: "1024",
          }),
        ),
      );
      proxies = await Promise.all(servers.map((s) => startTcpProxy({ host: "127.0.0.1", port: s.port })));
    }, 60_000);
    afterAll(async () => {
      await Promise.all(proxies.map((p) => p.close()));
      await Promise.all(servers.map((s) => s.close()));
      await db?.drop();
    });

    type Kind = "client" | "cli" | "explorer";

    /**
     * A stream that breaks, once, in the middle of a split commit of this run:
     * right after its first partial message, as a dropped connection would
     * (proxy cuts rarely land there: the pieces of a commit arrive together).
     * The client resumes from its last whole commit, the service sends that
     * commit again from its first piece, and what was already handed out must
     * not come twice.
     */
    function breakInSplit(isMine: (identifier: string) => boolean): Interceptor {
      let broken = false;
      return (next) => async (req) => {
        const res = await next(req);
        if (!res.stream) return res;
        const messages = res.message as AsyncIterable<WatchResponse>;
        return {
          ...res,
          message: (async function* () {
            for await (const m of messages) {
              yield m;
              if (!broken && m.partial && m.events.some((e) => isMine(e.identifier))) {
                broken = true;
                throw new ConnectError("the connection dropped in the middle of a split commit", Code.Unavailable);
              }
            }
          })(),
        };
      };
    }
    const KINDS: Kind[] = ["client", "cli", "explorer"];

    /** The read point now: the at of a fresh watch's first message (straight to the server, no proxy). */
    async function now(): Promise<string> {
      for await (const m of createClient(EventService, createGrpcTransport({ baseUrl: servers[0]!.url })).watch({}))
        return m.at;
      throw new Error("no first message");
    }

    /**
     * One watcher of `kind` from `since` through proxy `i`, resuming by itself
     * (the client library) until `done()` says it has had enough; its events
     * and the partial messages it met (the CLI prints events only: none).
     */
    async function watcher(
      kind: Kind,
      i: number,
      since: string,
      done: (events: LogEvent[]) => boolean,
      isMine: (identifier: string) => boolean,
    ): Promise<{ events: LogEvent[]; partials: number }> {
      const baseUrl = `http://127.0.0.1:${proxies[i % 2]!.port}`;
      const interceptors = [breakInSplit(isMine)];
      const ac = new AbortController();
      const events: LogEvent[] = [];
      let partials = 0;
      const params = { since, signal: ac.signal, retryMs: 10, maxRetryMs: 100, heartbeats: true };
      // Checked on every message, and by a timer for the CLI, which says nothing between events.
      const settle = () => {
        if (done(events)) ac.abort();
      };
      const timer = setInterval(settle, 50);
      try {
        if (kind === "cli") {
          const client = createResourceStoreClient({ baseUrl, transport: "connect", interceptors });
          await runWatch(
            client,
            { since, payloadTypes: [], includeResources: true },
            ac.signal,
            (line) => {
              const e = JSON.parse(line) as { at: string; identifier: string; kind: string; version: number };
              events.push([e.at, e.identifier, e.kind, e.version]);
              settle();
            },
            baseUrl,
          );
        } else {
          const feed =
            kind === "client"
              ? createResourceStoreClient({ baseUrl, transport: "grpc", interceptors }).watch({
                  ...params,
                  includeResources: true,
                })
              : watchEvents(
                  createConnectTransport({
                    baseUrl,
                    useBinaryFormat: false,
                    jsonOptions: { ignoreUnknownFields: true },
                    interceptors,
                  }),
                  { ...params, payloadTypes: [] },
                );
          for await (const m of feed) {
            if (m.partial) partials += 1;
            events.push(...m.events.map((e): LogEvent => [e.at, e.identifier, e.kind, Number(e.version)]));
            settle();
          }
        }
      } finally {
        clearInterval(timer);
        ac.abort();
      }
      return { events, partials };
    }

    it("every watcher of each client equals the model's log, across cut connections and split commits", async () => {
      const partialsMet: Record<Kind, number> = { client: 0, cli: 0, explorer: 0 };
      await fc.assert(
        fc.asyncProperty(
          fc.array(batchArb, { minLength: 1, maxLength: 6 }),
          fc.array(batchArb, { minLength: 1, maxLength: 6 }),
          fc.array(fc.integer({ min: 5, max: 120 }), { minLength: 1, maxLength: 6 }),
          async (batchesA, batchesB, cuts) => {
            const run0 = `k${Math.random().toString(36).slice(2, 8)}`;
            const since = await now();
            const expected: { log?: LogEvent[] } = {};
            const mineOf = (events: LogEvent[]) => events.filter((e) => e[1].startsWith(run0));
            // Enough once it has as many of this run's events as the log (a duplicate makes it stop early and fail).
            const done = (events: LogEvent[]) =>
              expected.log !== undefined && mineOf(events).length >= expected.log.length;
            const watchers = KINDS.map((kind, i) =>
              watcher(kind, i, since, done, (identifier) => identifier.startsWith(run0)).then((r) => ({ kind, ...r })),
            );
            // Connections cut while the writers run; each proxy takes new ones again soon after.
            let writing = true;
            const chaos = (async () => {
              for (let c = 0; writing; c++) {
                await new Promise((r) => setTimeout(r, cuts[c % cuts.length]));
                if (!writing) break;
                const p = proxies[c % 2]!;
                p.cut();
                setTimeout(() => p.restore(), 20);
              }
            })();
            const log: LogEvent[] = [];
            // Every run has one commit of five resources: larger than EVENTS_MAX_MESSAGE_BYTES, so split.
            const big: Batch = { kind: "create", items: POOL.map((p) => ({ id: p, parent: null, name: "n1" })) };
            const writers = [[big, ...batchesA], batchesB].map((batches, w) =>
              writeBatches(createResourceStore(servers[w]!.app.db), `${run0}${w}-`, batches, log),
            );
            await Promise.all(writers);
            writing = false;
            await chaos;
            for (const p of proxies) p.restore();
            log.sort(byCommitThenId);
            expected.log = log;
            const deadline = setTimeout(() => (expected.log = []), 30_000);
            try {
              for (const { kind, events, partials } of await Promise.all(watchers)) {
                partialsMet[kind] += partials;
                expect({ kind, events: mineOf(events) }).toEqual({ kind, events: log });
              }
            } finally {
              clearTimeout(deadline);
            }
          },
        ),
        { numRuns: Number(process.env.EVENTS_MODEL_CLIENT_RUNS ?? 5) },
      );
      console.log(`events model through the clients: partial messages met ${JSON.stringify(partialsMet)}`);
      // The five-resource commit of every run is split for the client library (with resources) and the explorer.
      expect(partialsMet.client).toBeGreaterThan(0);
      expect(partialsMet.explorer).toBeGreaterThan(0);
    }, 300_000);
  },
);
