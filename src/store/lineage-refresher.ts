// Keeps the lineage view fresh on PostgreSQL: LISTEN on the channel the
// resources triggers notify (after commit, from any service process), then a
// debounced REFRESH ... CONCURRENTLY. A burst of writes costs one refresh; a
// steady stream still refreshes at least every `maxDelayMs`.
//
// LISTEN needs a connection of its own that stays open, so the refresher opens
// one pg.Client next to the pool; when it drops, the refresher reconnects and
// refreshes once, since notifications sent meanwhile are lost.
import pg from "pg";
import type { Db } from "./db.js";
import { hasLineageView, LINEAGE_CHANNEL, refreshLineageView } from "./lineage-view.js";

export interface LineageRefresherOptions {
  readonly db: Db;
  /** The same database as `db`, for the listening connection. */
  readonly databaseUrl: string;
  /** Quiet time after the last notification before refreshing (default 200 ms). */
  readonly debounceMs?: number;
  /** Longest wait after the first pending notification (default 2 s). */
  readonly maxDelayMs?: number;
  /** Wait before reconnecting a lost listener (default 1 s). */
  readonly reconnectMs?: number;
  /** Told about failed refreshes and lost connections (they are retried). */
  readonly onError?: (err: unknown) => void;
}

export interface LineageRefresher {
  /** Connects and listens; refreshes once to catch up with writes made while nobody listened. */
  start(): Promise<void>;
  /** Stops listening and waits for a running refresh to end. */
  stop(): Promise<void>;
  /** Resolves when no refresh is pending or running (for tests and shutdown). */
  settled(): Promise<void>;
  /** Refreshes completed so far. */
  readonly refreshes: number;
}

export function createLineageRefresher(options: LineageRefresherOptions): LineageRefresher {
  const debounceMs = options.debounceMs ?? 200;
  const maxDelayMs = options.maxDelayMs ?? 2000;
  const reconnectMs = options.reconnectMs ?? 1000;
  const onError = options.onError ?? (() => {});

  let client: pg.Client | undefined;
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
    const c = new pg.Client({ connectionString: options.databaseUrl, connectionTimeoutMillis: 10_000 });
    c.on("notification", (msg) => {
      if (msg.channel === LINEAGE_CHANNEL) schedule();
    });
    c.on("error", (err) => {
      onError(err);
      void reconnect(c);
    });
    c.on("end", () => void reconnect(c));
    await c.connect();
    await c.query(`LISTEN ${LINEAGE_CHANNEL}`);
    client = c;
  }

  let reconnecting = false;
  async function reconnect(lost: pg.Client): Promise<void> {
    if (stopped || reconnecting || client !== lost) return;
    reconnecting = true;
    client = undefined;
    lost.removeAllListeners("end");
    void lost.end().catch(() => {});
    while (!stopped) {
      await new Promise((r) => setTimeout(r, reconnectMs));
      if (stopped) break;
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

  return {
    async start() {
      // The embedded store has no view: nothing to keep fresh.
      if (!hasLineageView(options.db)) return;
      stopped = false;
      await connect();
      schedule();
    },
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      timer = undefined;
      const c = client;
      client = undefined;
      if (c) {
        c.removeAllListeners("end");
        c.removeAllListeners("error");
        c.on("error", () => {});
        await c.end().catch(() => {});
      }
      await running;
      wakeWaiters();
    },
    settled() {
      if (idle()) return Promise.resolve();
      return new Promise((resolve) => waiters.push(resolve));
    },
    get refreshes() {
      return refreshes;
    },
  };
}
