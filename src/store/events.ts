// The change feed: the history read in commit order (docs/contract/14-events.md). No
// second queue: every committed version is an event, and its kind comes from
// the version before it. NOTIFY only wakes readers; what they send comes from
// the versions and the clock.
//
// Never losing a change rests on the clock (store/sql.ts): every write
// transaction first takes the clock row and stamps its versions with the new
// `last`, and the row lock is held to commit, so a transaction whose stamp is
// at or below the committed `last` has committed, and every later commit
// stamps above it. A page therefore reads `clock.last` and the versions in
// one statement (one snapshot) and never past that `last`: a commit still in
// flight is read by a later page, never skipped.
//
// All the SQL that reads the history is in readHistoryPage() and readPoint(),
// over the one relation named HISTORY (a version's columns and its period
// [tx_from, tx_to)); point it elsewhere (a union of current and superseded
// versions, say) and nothing else changes.
import { checkIdentifier, payloadTypeOrThrow } from "../schema/validate.js";
import type { Db } from "./db.js";
import type { Notifications } from "./notifications.js";
import { readerFor } from "./replicas.js";
import { resourceColumns, toStoredResource, ts, type ResourceRow } from "./sql.js";
import type { StoredResource } from "./types.js";

/** The history relation: one row per version with tx_from (its commit's stamp) and tx_to. */
const HISTORY = "resource_history";

/** Sent by the clock trigger after every committed write (migrations/0012-events.ts). */
export const EVENTS_CHANNEL = "resource_events";

/** The read point before any commit (a feed over an empty store). */
export const BEGINNING = "1970-01-01T00:00:00.000000Z";

export type EventKind = "created" | "updated" | "deleted" | "restored";

export interface ResourceEvent {
  /** The commit's stamp, RFC 3339 UTC with microseconds. */
  at: string;
  identifier: string;
  payloadType: string;
  kind: EventKind;
  version: number;
  /** The version itself (only when asked for). */
  resource?: StoredResource;
}

export interface EventFilter {
  /** Empty = every type. */
  readonly payloadTypes?: readonly string[];
  /** Only this resource and its descendants, as the tree was at each event's instant. */
  readonly rootIdentifier?: string;
  readonly includeResources?: boolean;
}

export interface HistoryPage {
  /** Events in (since, upto], commit order, whole commits. */
  readonly events: ResourceEvent[];
  /** How far this page read: every commit up to here is in it (or filtered out). */
  readonly upto: string;
  /** True when the page stopped at its row budget: more history may follow at once. */
  readonly more: boolean;
}

type PageRow = Partial<ResourceRow> & {
  upto: string | null;
  full: boolean;
  at: string | null;
  kind: EventKind | null;
};

/**
 * Reads the next page of history after `since` (exclusive; null = from the
 * beginning): about `limit` versions, extended to the end of the last commit
 * it touches, never past the committed clock. Filters apply after the window
 * is chosen, so a sparse filter still advances `upto` page by page.
 */
export async function readHistoryPage(db: Db, since: string | null, limit: number, filter: EventFilter = {}): Promise<HistoryPage> {
  const withResources = filter.includeResources === true;
  const { rows } = await db.query<PageRow>(
    `WITH c AS (SELECT last FROM clock),
     win AS (
        SELECT h.tx_from FROM ${HISTORY} h, c
         WHERE h.tx_from > $1::timestamptz AND h.tx_from <= c.last
         ORDER BY h.tx_from LIMIT $2
     ),
     b AS (
        SELECT CASE WHEN count(*) < $2 THEN (SELECT last FROM c) ELSE max(win.tx_from) END AS upto,
               count(*) >= $2 AS full
          FROM win
     )
     SELECT CASE WHEN isfinite(b.upto) THEN ${ts("b.upto")} END AS upto, b.full, e.*
       FROM b LEFT JOIN LATERAL (
        SELECT ${ts("v.tx_from")} AS at,
               CASE WHEN p.identifier IS NULL THEN 'created'
                    WHEN v.is_deleted AND NOT p.is_deleted THEN 'deleted'
                    WHEN NOT v.is_deleted AND p.is_deleted THEN
                      CASE WHEN v.created_at = v.tx_from THEN 'created' ELSE 'restored' END
                    ELSE 'updated' END AS kind,
               ${withResources ? resourceColumns("v") : "v.identifier, v.payload_type, v.version::text AS version"}
          FROM ${HISTORY} v
          LEFT JOIN ${HISTORY} p ON p.identifier = v.identifier AND p.version = v.version - 1
         WHERE v.tx_from > $1::timestamptz AND v.tx_from <= b.upto
           AND (cardinality($3::text[]) = 0 OR v.payload_type = ANY($3::text[]))
           AND ($4::text IS NULL OR EXISTS (
                 WITH RECURSIVE up(identifier, parent, depth) AS (
                   SELECT v.identifier, v.parent_identifier, 0
                   UNION ALL
                   SELECT a.identifier, a.parent_identifier, up.depth + 1
                     FROM up JOIN ${HISTORY} a ON a.identifier = up.parent
                      AND a.tx_from <= v.tx_from AND v.tx_from < a.tx_to
                    WHERE up.identifier <> $4::text AND up.depth < 10000
                 )
                 SELECT 1 FROM up WHERE up.identifier = $4::text))
         ORDER BY v.tx_from, v.identifier
       ) e ON true`,
    [since ?? "-infinity", limit, filter.payloadTypes ?? [], filter.rootIdentifier ?? null],
  );
  const first = rows[0];
  const upto = first?.upto ?? since ?? BEGINNING;
  const events: ResourceEvent[] = [];
  for (const r of rows) {
    if (r.at === null || r.kind === null || r.identifier === undefined) continue;
    const event: ResourceEvent = {
      at: r.at,
      identifier: r.identifier,
      payloadType: r.payload_type ?? "",
      kind: r.kind,
      version: Number(r.version),
    };
    if (withResources) event.resource = toStoredResource(r as ResourceRow, false);
    events.push(event);
  }
  return { events, upto: since !== null && since > upto ? since : upto, more: first?.full === true };
}

/** The committed clock now, normalised (BEGINNING before any commit); `since`, when given, normalised the same way. */
export async function readPoint(db: Db, since?: string): Promise<{ now: string; since: string | undefined }> {
  const { rows } = await db.query<{ now: string | null; since: string | null }>(
    `SELECT CASE WHEN isfinite(last) THEN ${ts("last")} END AS now,
            CASE WHEN $1::timestamptz IS NOT NULL THEN ${ts("$1::timestamptz")} END AS since
       FROM clock`,
    [since ?? null],
  );
  return { now: rows[0]?.now ?? BEGINNING, since: rows[0]?.since ?? undefined };
}

export interface WatchOptions extends EventFilter {
  /** Already checked RFC 3339 (rpc/as-of.ts parseAsOf); exclusive. Unset = from now on. */
  readonly since?: string;
  /** A message with no events after this long without one. */
  readonly heartbeatMs: number;
  /** Ends the stream (client gone, server shutting down). */
  readonly signal?: AbortSignal;
}

/** One stream message: whole commits, or none (a heartbeat at the read point). */
export interface EventMessage {
  readonly at: string;
  readonly events: readonly ResourceEvent[];
}

export interface EventFeed {
  /**
   * Messages in commit order, pulled: the next page is read only when the
   * consumer asks for the next message, so a slow consumer costs one page.
   * The first message comes at once (empty when there is nothing to send).
   */
  watch(options: WatchOptions): AsyncGenerator<EventMessage, void, undefined>;
  /** Ends every open watch (shutdown) and stops listening. */
  close(): Promise<void>;
}

export interface EventFeedOptions {
  readonly db: Db;
  /** Wake-ups after commits; without them a watch still sees every commit at its next heartbeat. */
  readonly notifications?: Notifications;
  /** Versions per page (default 1000); a commit is never split, so a page may hold more. */
  readonly pageSize?: number;
}

/** Checks a watch filter the way every surface does (invalid_argument). */
export function checkEventFilter(filter: EventFilter): void {
  if (filter.rootIdentifier !== undefined) checkIdentifier(filter.rootIdentifier, "root_identifier");
  for (const t of filter.payloadTypes ?? []) payloadTypeOrThrow(t);
}

export function createEventFeed(options: EventFeedOptions): EventFeed {
  const { db } = options;
  const pageSize = options.pageSize ?? 1000;
  // Bumped by every notification; a watch that read at generation g and sees
  // g again sleeps until the next bump (or its heartbeat).
  let generation = 0;
  const sleepers = new Set<() => void>();
  const wake = () => {
    generation += 1;
    for (const fn of [...sleepers]) fn();
  };
  const closing = new AbortController();
  let subscribed: Promise<(() => Promise<void>) | undefined> | undefined;
  const subscribe = () => (subscribed ??= options.notifications?.subscribe(EVENTS_CHANNEL, wake) ?? Promise.resolve(undefined));

  /** Resolves after a wake-up past `seen`, after `ms`, or on abort; true when woken. */
  function sleep(seen: number, ms: number, signal: AbortSignal): Promise<boolean> {
    if (generation !== seen || signal.aborted) return Promise.resolve(generation !== seen);
    return new Promise((resolve) => {
      const done = (woken: boolean) => {
        clearTimeout(timer);
        sleepers.delete(onWake);
        signal.removeEventListener("abort", onAbort);
        resolve(woken);
      };
      const onWake = () => done(true);
      const onAbort = () => done(false);
      const timer = setTimeout(() => done(false), ms);
      sleepers.add(onWake);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  async function* watch(opts: WatchOptions): AsyncGenerator<EventMessage, void, undefined> {
    checkEventFilter(opts);
    const signal = opts.signal ? AbortSignal.any([opts.signal, closing.signal]) : closing.signal;
    await subscribe();
    const start = await readPoint(db, opts.since);
    // Unset since = only commits after the read point of the moment the watch starts.
    let since: string = start.since ?? start.now;
    // The first message goes out at once, a heartbeat if there is nothing to
    // send: the client learns its read point and can resume from it.
    let lastSent = -Infinity;
    // Catching up on the past (a replay, or a page that was full) may run on a
    // standby that has replayed that far (store/replicas.ts); the live tail
    // reads the primary, so a commit is delivered as soon as it is notified.
    let catchingUp = opts.since !== undefined;
    while (!signal.aborted) {
      const seen = generation;
      const source = catchingUp ? await readerFor(db, since) : db;
      const page = await readHistoryPage(source, since, pageSize, opts);
      if (signal.aborted) return;
      catchingUp = page.more;
      since = page.upto;
      const last = page.events[page.events.length - 1];
      if (last !== undefined) {
        yield { at: last.at, events: page.events };
        lastSent = Date.now();
        continue;
      }
      if (page.more) continue;
      const quiet = Date.now() - lastSent;
      if (quiet >= opts.heartbeatMs) {
        yield { at: since, events: [] };
        lastSent = Date.now();
        continue;
      }
      // Woken or not, read again: a lost notification costs at most a heartbeat.
      await sleep(seen, opts.heartbeatMs - quiet, signal);
    }
  }

  return {
    watch,
    async close() {
      closing.abort();
      const off = await subscribed?.catch(() => undefined);
      await off?.();
    },
  };
}
