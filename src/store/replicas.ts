// Reads from PostgreSQL hot standbys (streaming replication).
//
// Every write takes the clock row first and holds it until commit, so
// commits happen in clock order and the clock row a standby has replayed
// says exactly which commits it holds: a standby whose replayed clock is at
// or past a read point answers a read at that point exactly as the primary
// would. A read at as_of = t may therefore run on any standby that has
// replayed t; a read "now" first takes the primary's committed clock as its
// point (so a client sees its own writes) and may then run on a standby that
// has replayed that.
//
// A standby is never waited on past a short bound: its replayed stamp is
// cached for a short time (a stamp only grows, so a cached one that is
// already past the read point is proof enough), asking it again is bounded by
// the timeout, and one that failed is left alone for a while. A read that
// fails on a standby for want of it (connection lost, recovery conflict) runs
// again on the primary.
import { Code, ConnectError } from "@connectrpc/connect";
import { stampMicros } from "../time.js";
import type { Db, Queryable, ReadCounts, TransactionOptions } from "./db.js";
import { ts } from "./sql.js";

export interface StandbyOptions {
  /** Longest wait for a standby's connection or its replayed stamp (ms). */
  readonly timeoutMs: number;
  /** How long a fetched replayed stamp is used before asking again (ms). */
  readonly stampTtlMs: number;
  /** How long a standby that failed is skipped (default max(5 × ttl, 2 s)). */
  readonly downMs?: number;
}

/** A stamp before every other one: the clock before the first write (-infinity). */
const BEGINNING = -(2n ** 62n);

interface Standby {
  readonly db: Db;
  /** The replayed clock stamp last seen (micros); a lower bound of what it holds now. */
  stamp: bigint | undefined;
  fetchedAt: number;
  downUntil: number;
  fetching: Promise<bigint | undefined> | undefined;
}

async function clockOf(q: Queryable): Promise<bigint> {
  const { rows } = await q.query<{ at: string | null }>(
    `SELECT CASE WHEN isfinite(last) THEN ${ts("last")} END AS at FROM clock`,
  );
  const at = rows[0]?.at;
  if (at === undefined) throw new Error("clock row missing");
  return at === null ? BEGINNING : (stampMicros(at) ?? BEGINNING);
}

function bounded<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** A failure of the standby itself (not of the statement): the primary may still answer. */
function standbyFailed(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.Unavailable;
}

/**
 * The primary, with `reader` choosing among the standbys: its query,
 * exec and transaction are the primary's (writes, and reads that must see
 * the primary); a read that may run on a standby asks `readerFor(db, point)`
 * for the Db to run on.
 */
export function primaryWithStandbys(primary: Db, standbyDbs: readonly Db[], options: StandbyOptions): Db {
  const downMs = options.downMs ?? Math.max(5 * options.stampTtlMs, 2000);
  const standbys: Standby[] = standbyDbs.map((db) => ({
    db,
    stamp: undefined,
    fetchedAt: 0,
    downUntil: 0,
    fetching: undefined,
  }));
  const counts = { primary: 0, standby: 0 };

  const markDown = (s: Standby) => {
    s.downUntil = Date.now() + downMs;
    s.stamp = undefined;
  };

  /** The standby's replayed stamp: cached within the TTL, else asked (bounded); undefined when it is down. */
  function replayed(s: Standby): Promise<bigint | undefined> {
    const now = Date.now();
    if (now < s.downUntil) return Promise.resolve(undefined);
    if (s.stamp !== undefined && now - s.fetchedAt < options.stampTtlMs) return Promise.resolve(s.stamp);
    s.fetching ??= bounded(clockOf(s.db), options.timeoutMs)
      .then(
        (stamp) => {
          s.stamp = stamp;
          s.fetchedAt = Date.now();
          return stamp;
        },
        () => {
          markDown(s);
          return undefined;
        },
      )
      .finally(() => {
        s.fetching = undefined;
      });
    return s.fetching;
  }

  /** The standby's Db, falling back to the primary when the standby fails under a read. */
  function onStandby(s: Standby): Db {
    let moved = false;
    const fallBack = <T>(err: unknown, again: () => Promise<T>): Promise<T> => {
      if (!standbyFailed(err)) throw err;
      markDown(s);
      // This read counts once, where it ended up (a read may send several statements).
      if (!moved) {
        moved = true;
        counts.standby -= 1;
        counts.primary += 1;
      }
      return again();
    };
    const copyOut = s.db.copyOut;
    const primaryCopy = primary.copyOut;
    return {
      ...s.db,
      ...(copyOut && primaryCopy
        ? {
            // Like a transaction: only a COPY that failed before its first byte may run again.
            async *copyOut(sql: string, params: readonly unknown[]): AsyncGenerator<Uint8Array> {
              let sent = false;
              try {
                for await (const piece of copyOut(sql, params)) {
                  sent = true;
                  yield piece;
                }
              } catch (err) {
                if (sent) throw err;
                yield* await fallBack(err, () => Promise.resolve(primaryCopy(sql, params)));
              }
            },
          }
        : {}),
      query: <R>(sql: string, params?: readonly unknown[]) =>
        s.db.query<R>(sql, params).catch((err: unknown) => fallBack(err, () => primary.query<R>(sql, params))),
      async transaction<U>(fn: (tx: Queryable) => Promise<U>, options?: TransactionOptions): Promise<U> {
        // Only a transaction that failed before fn ran may run again: fn may have sent rows on.
        let started = false;
        try {
          return await s.db.transaction((tx) => {
            started = true;
            return fn(tx);
          }, options);
        } catch (err) {
          if (started) throw err;
          return fallBack(err, () => primary.transaction(fn, options));
        }
      },
    };
  }

  const pick = (s: Standby): Db => {
    counts.standby += 1;
    return onStandby(s);
  };

  async function reader(readPoint: string | undefined): Promise<Db> {
    let need = readPoint !== undefined ? stampMicros(readPoint) : undefined;
    if (need !== undefined) {
      // Fast path: a standby already known to hold the point.
      const now = Date.now();
      for (const s of standbys) if (now >= s.downUntil && s.stamp !== undefined && s.stamp >= need) return pick(s);
    }
    // Every standby down: no need to learn the point.
    if (standbys.every((s) => Date.now() < s.downUntil)) {
      counts.primary += 1;
      return primary;
    }
    // The point a read at `need` really reads: least(as_of, committed clock).
    let committed: bigint;
    try {
      committed = await clockOf(primary);
    } catch {
      // The primary's own error surfaces from the read itself.
      counts.primary += 1;
      return primary;
    }
    need = need === undefined || committed < need ? committed : need;
    for (const s of standbys) {
      const stamp = await replayed(s);
      if (stamp !== undefined && stamp >= need) return pick(s);
    }
    counts.primary += 1;
    return primary;
  }

  return {
    ...primary,
    reader,
    readCounts: (): ReadCounts => ({ ...counts }),
    async close() {
      await Promise.all([primary.close(), ...standbys.map((s) => s.db.close())]);
    },
  };
}

/** The Db a read at `readPoint` (an as_of or pinned stamp; undefined = now) runs on. */
export function readerFor(db: Db, readPoint: string | undefined): Promise<Db> {
  return db.reader !== undefined ? db.reader(readPoint) : Promise.resolve(db);
}
