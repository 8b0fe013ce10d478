// Keeps the lineage view fresh on PostgreSQL: LISTEN on the channel the
// resources triggers notify (after commit, from any service process), then a
// debounced REFRESH ... CONCURRENTLY. A burst of writes costs one refresh; a
// steady stream still refreshes at least every `maxDelayMs`.
//
// LISTEN needs a connection of its own that stays open, which the Db opens
// (db.listen); when it drops, the refresher listens again and refreshes once,
// since notifications sent meanwhile are lost.
//
// With several service processes on one database, one refresher is elected:
// the one holding a session advisory lock (db.lease) listens and refreshes;
// the others try to take the lock every `electionMs`, so when the leader's
// process (or its connection) dies, another takes over.
import type { Db, Lease, Listener } from "./db.js";
import { hasLineageView, LINEAGE_CHANNEL, refreshLineageView } from "./lineage-view.js";

export interface LineageRefresherOptions {
  /** Listens through db.listen (capabilities.listen). */
  readonly db: Db;
  /** Quiet time after the last notification before refreshing (default 200 ms). */
  readonly debounceMs?: number;
  /** Longest wait after the first pending notification (default 2 s). */
  readonly maxDelayMs?: number;
  /** Wait before reconnecting a lost listener (default 1 s). */
  readonly reconnectMs?: number;
  /** Told about failed refreshes and lost connections (they are retried). */
  readonly onError?: (err: unknown) => void;
  /** How often a refresher that is not the elected one tries to become it (default 5 s). */
  readonly electionMs?: number;
}

// An arbitrary constant naming "the elected lineage view refresher".
const LEADER_LOCK_KEY = 7_362_918_005;

export interface LineageRefresher {
  /** Connects and listens; refreshes once to catch up with writes made while nobody listened. */
  start(): Promise<void>;
  /** Stops listening and waits for a running refresh to end. */
  stop(): Promise<void>;
  /** Resolves when no refresh is pending or running (for tests and shutdown). */
  settled(): Promise<void>;
  /** Refreshes completed so far. */
  readonly refreshes: number;
  /** Whether this refresher is the elected one (it listens and refreshes). */
  readonly leader: boolean;
}

export function createLineageRefresher(options: LineageRefresherOptions): LineageRefresher {
  const debounceMs = options.debounceMs ?? 200;
  const maxDelayMs = options.maxDelayMs ?? 2000;
  const reconnectMs = options.reconnectMs ?? 1000;
  const onError = options.onError ?? (() => {});
  const electionMs = options.electionMs ?? 5000;
  let lease: Lease | undefined;
  let electionTimer: NodeJS.Timeout | undefined;

  let client: Listener | undefined;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let firstPendingAt: number | undefined;
  let running: Promise<void> | undefined;
  let dirtyWhileRunning = false;
  let refreshes = 0;
  let waiters: (() => void)[] = [];

  const idle = () => timer === undefined && running === undefined;
  const wakeWaiters = () => {
    if (!idle()) return;
    const w = waiters;
    waiters = [];
    for (const fn of w) fn();
  };

  function schedule(): void {
    if (stopped) return;
    if (running) {
      dirtyWhileRunning = true;
      return;
    }
    const now = Date.now();
    firstPendingAt ??= now;
    const delay = Math.max(0, Math.min(debounceMs, firstPendingAt + maxDelayMs - now));
    if (timer) clearTimeout(timer);
    timer = setTimeout(fire, delay);
  }

  function fire(): void {
    timer = undefined;
    firstPendingAt = undefined;
    dirtyWhileRunning = false;
    running = (async () => {
      try {
        // Another process refreshing right now may have taken its snapshot
        // before our notification's commit: try again after it.
        if (await refreshLineageView(options.db, { wait: false })) refreshes += 1;
        else dirtyWhileRunning = true;
      } catch (err) {
        onError(err);
        dirtyWhileRunning = true;
      }
    })().finally(() => {
      running = undefined;
      if (dirtyWhileRunning && !stopped) schedule();
      wakeWaiters();
    });
  }

  async function connect(): Promise<void> {
    const db = options.db;
    if (db.listen === undefined) throw new Error("this database cannot LISTEN");
    const l: Listener = await db.listen(LINEAGE_CHANNEL, {
      onNotify: schedule,
      onLost: (err) => {
        if (err !== undefined) onError(err);
        void reconnect(l);
      },
    });
    client = l;
  }

  let reconnecting = false;
  async function reconnect(lost: Listener): Promise<void> {
    if (stopped || reconnecting || client !== lost) return;
    reconnecting = true;
    client = undefined;
    void lost.close();
    while (!stopped) {
      await new Promise((r) => setTimeout(r, reconnectMs));
      // No longer the elected refresher (its lease went meanwhile): the next election listens.
      if (stopped || (options.db.lease !== undefined && lease === undefined)) break;
      try {
        await connect();
        schedule();
        break;
      } catch (err) {
        onError(err);
      }
    }
    reconnecting = false;
  }

  /** Becomes the elected refresher, or tries again later; a Db without leases has only this refresher. */
  async function elect(): Promise<void> {
    electionTimer = undefined;
    if (stopped) return;
    const db = options.db;
    if (db.lease !== undefined) {
      let got: Lease | undefined;
      try {
        got = await db.lease(LEADER_LOCK_KEY, (err) => {
          if (err !== undefined) onError(err);
          void stepDown();
        });
      } catch (err) {
        onError(err);
      }
      if (got === undefined || stopped) {
        await got?.release();
        if (!stopped) electionTimer = setTimeout(() => void elect(), electionMs);
        return;
      }
      lease = got;
    }
    try {
      await connect();
    } catch (err) {
      // Leader without a listener: give the lock up so another may do better.
      onError(err);
      await stepDown();
      return;
    }
    schedule();
  }

  /** The lease was lost: stop listening and stand for election again. */
  async function stepDown(): Promise<void> {
    const l = lease;
    lease = undefined;
    await l?.release();
    const c = client;
    client = undefined;
    await c?.close();
    if (!stopped && electionTimer === undefined) electionTimer = setTimeout(() => void elect(), electionMs);
  }

  return {
    async start() {
      // The embedded store has no view: nothing to keep fresh.
      if (!hasLineageView(options.db) || !options.db.capabilities.listen) return;
      stopped = false;
      await elect();
    },
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      timer = undefined;
      if (electionTimer) clearTimeout(electionTimer);
      electionTimer = undefined;
      const c = client;
      client = undefined;
      if (c) await c.close();
      await running;
      const l = lease;
      lease = undefined;
      await l?.release();
      wakeWaiters();
    },
    settled() {
      if (idle()) return Promise.resolve();
      return new Promise((resolve) => waiters.push(resolve));
    },
    get refreshes() {
      return refreshes;
    },
    get leader() {
      return lease !== undefined || (client !== undefined && options.db.lease === undefined);
    },
  };
}
