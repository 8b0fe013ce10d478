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
//
// Sharing (docs/events.md): a stream first catches up on its own, page by page,
// with its filters in the SQL and a watermark at least every heartbeat.
// Once it has reached the live point it joins a tail: one reader per grants
// key (and per include_resources) that reads each new commit once, without
// type or subtree filters, and hands the same page to every stream joined to
// it; each stream filters that page in memory. A stream that falls behind
// (its queue full) or that the page cannot serve (a subtree the read did not
// tag) leaves the tail and catches up on its own again from its own point,
// so a slow client never holds more than a few pages.
// stats() counts the reads of each kind and the departures by reason
// (rs_events_* on /metrics, docs/events.md).
import { setMaxListeners } from "node:events";
import { resourceExhausted } from "../errors.js";
import { checkIdentifier, payloadTypeOrThrow } from "../schema/validate.js";
import { stampMicros } from "../time.js";
import { grantsKey, type Grants } from "../access/index.js";
import type { Db } from "./db.js";
import type { Notifications } from "./notifications.js";
import { readerFor } from "./replicas.js";
import { resourceColumns, toStoredResource, ts, type ResourceRow } from "./sql.js";
import type { StoredResource } from "./types.js";
import { visibleAt } from "./visibility.js";

/** The history relation: one row per version with tx_from (its commit's stamp) and tx_to. */
const HISTORY = "resource_history";

/** Sent after every write transaction that wrote a version (migrations 0012 and 0015). */
export const EVENTS_CHANNEL = "resource_events";

/**
 * The read point of a store that has committed nothing (the clock still at
 * -infinity), as the feed writes it. Not the "before everything" of
 * replicas.ts, which is a number far before 1970.
 */
const EMPTY_STORE_POINT = "1970-01-01T00:00:00.000000Z";

/** Who wrote the version (migration 0017: every version's actor column). */
function actorColumn(v: string): string {
  return `${v}.actor`;
}

/**
 * The one place where section 18's visibility enters the feed's SQL: the
 * store's predicate over the version row `v` at its own commit (the stricter
 * of that version and the resource now, docs/contract/18-access.md). Every
 * read of the history (a stream's own catch-up and the shared tail) goes
 * through it, and shared reads are keyed by grantsKey(grants), so two
 * callers with different grants never share rows.
 */
function visibleSql(grants: Grants, v: string): string {
  return visibleAt(grants, v, `${v}.tx_from`) ?? "true";
}

type EventKind = "created" | "updated" | "deleted" | "restored";

export interface ResourceEvent {
  /** The commit's stamp, RFC 3339 UTC with microseconds. */
  at: string;
  identifier: string;
  payloadType: string;
  kind: EventKind;
  version: number;
  /** Who wrote this version (section 19); "unknown" until the history records it. */
  actor: string;
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
  /**
   * True when the page stopped at its row budget and more history may follow
   * at once. The window looks one row past the budget, so history that
   * exactly fills a page reads as complete (no empty read after it); a
   * commit that runs past the budget is read whole and still reads as more.
   */
  readonly more: boolean;
}

export interface PageReadOptions {
  /**
   * Instead of filtering by rootIdentifier, tag each event with which of
   * these roots it was under at its instant (subtreeOf): the shared tail
   * reads once for streams with different roots.
   */
  readonly tagRoots?: readonly string[];
}

type PageRow = Partial<ResourceRow> & {
  upto: string | null;
  full: boolean;
  at: string | null;
  kind: EventKind | null;
  actor: string | null;
  under: string[] | null;
};

/** The roots (of PageReadOptions.tagRoots) an event of a tagged page was under. */
const underOf = new WeakMap<ResourceEvent, readonly string[]>();

/** Whether the event of a tagged page was under `root` at its instant. */
function isUnder(event: ResourceEvent, root: string): boolean {
  return underOf.get(event)?.includes(root) === true;
}

/** The ancestors-or-self walk of version `v` at its own instant, as the tree was then. */
function walkUp(stopAt: string | undefined): string {
  return `WITH RECURSIVE up(identifier, parent, depth) AS (
             SELECT v.identifier, v.parent_identifier, 0
             UNION ALL
             SELECT a.identifier, a.parent_identifier, up.depth + 1
               FROM up JOIN ${HISTORY} a ON a.identifier = up.parent
                AND a.tx_from <= v.tx_from AND v.tx_from < a.tx_to
              WHERE ${stopAt !== undefined ? `up.identifier <> ${stopAt} AND ` : ""}up.depth < 10000
           )`;
}

/**
 * Reads the next page of history after `since` (exclusive; null = from the
 * beginning): about `limit` versions, extended to the end of the last commit
 * it touches, never past the committed clock. Filters apply after the window
 * is chosen, so a sparse filter still advances `upto` page by page.
 */
export async function readHistoryPage(
  db: Db,
  grants: Grants,
  since: string | null,
  limit: number,
  filter: EventFilter = {},
  options: PageReadOptions = {},
): Promise<HistoryPage> {
  const withResources = filter.includeResources === true;
  const tagRoots = options.tagRoots ?? [];
  const params: unknown[] = [since ?? "-infinity", limit, filter.payloadTypes ?? [], filter.rootIdentifier ?? null];
  const under =
    tagRoots.length > 0
      ? `ARRAY(${walkUp(undefined)} SELECT identifier FROM up WHERE identifier = ANY($${params.push(tagRoots)}::text[]))`
      : "NULL::text[]";
  const visible = visibleSql(grants, "v");
  const { rows } = await db.query<PageRow>(
    `WITH c AS (SELECT last FROM clock),
     win AS (
        SELECT h.tx_from FROM ${HISTORY} h, c
         WHERE h.tx_from > $1::timestamptz AND h.tx_from <= c.last
         ORDER BY h.tx_from LIMIT $2::int + 1
     ),
     b AS (
        SELECT CASE WHEN count(*) <= $2::int THEN (SELECT last FROM c)
                    ELSE (SELECT w.tx_from FROM win w ORDER BY w.tx_from OFFSET $2::int - 1 LIMIT 1) END AS upto,
               count(*) > $2::int AS full
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
               ${actorColumn("v")} AS actor,
               ${under} AS under,
               ${withResources ? resourceColumns("v") : "v.identifier, v.payload_type, v.version::text AS version"}
          FROM ${HISTORY} v
          LEFT JOIN ${HISTORY} p ON p.identifier = v.identifier AND p.version = v.version - 1
         WHERE v.tx_from > $1::timestamptz AND v.tx_from <= b.upto
           AND (cardinality($3::text[]) = 0 OR v.payload_type = ANY($3::text[]))
           AND ($4::text IS NULL OR EXISTS (${walkUp("$4::text")} SELECT 1 FROM up WHERE up.identifier = $4::text))
           AND ${visible}
         ORDER BY v.tx_from, v.identifier
       ) e ON true`,
    params,
  );
  const first = rows[0];
  const upto = first?.upto ?? since ?? EMPTY_STORE_POINT;
  const events: ResourceEvent[] = [];
  for (const r of rows) {
    if (r.at === null || r.kind === null || r.identifier === undefined) continue;
    const event: ResourceEvent = {
      at: r.at,
      identifier: r.identifier,
      payloadType: r.payload_type ?? "",
      kind: r.kind,
      version: Number(r.version),
      actor: r.actor ?? "unknown",
    };
    if (withResources) event.resource = toStoredResource(r as ResourceRow, false);
    if (r.under !== null && r.under !== undefined && r.under.length > 0) underOf.set(event, r.under);
    events.push(event);
  }
  return { events, upto: since !== null && since > upto ? since : upto, more: first?.full === true };
}

/** The committed clock now, normalised (EMPTY_STORE_POINT before any commit); `since`, when given, normalised the same way. */
async function readPoint(db: Db, since?: string): Promise<{ now: string; since: string | undefined }> {
  const { rows } = await db.query<{ now: string | null; since: string | null }>(
    `SELECT CASE WHEN isfinite(last) THEN ${ts("last")} END AS now,
            CASE WHEN $1::timestamptz IS NOT NULL THEN ${ts("$1::timestamptz")} END AS since
       FROM clock`,
    [since ?? null],
  );
  return { now: rows[0]?.now ?? EMPTY_STORE_POINT, since: rows[0]?.since ?? undefined };
}

/**
 * The instant one microsecond before a commit's stamp: the `at` of the
 * partial messages of a split commit. Stamps strictly increase by at least a
 * microsecond, so every earlier commit is at or before it, and `since` being
 * exclusive, resuming from it sends that whole commit again.
 */
export function beforeStamp(at: string): string {
  const micros = stampMicros(at);
  if (micros === undefined) throw new Error(`not a stamp: ${at}`);
  const m = micros - 1n;
  let secs = m / 1_000_000n;
  let frac = m % 1_000_000n;
  if (frac < 0n) {
    secs -= 1n;
    frac += 1_000_000n;
  }
  return `${new Date(Number(secs) * 1000).toISOString().slice(0, 19)}.${frac.toString().padStart(6, "0")}Z`;
}

const eventSizes = new WeakMap<ResourceEvent, number>();

/**
 * An upper estimate of an event's size on the wire, in bytes: its fields as
 * JSON (what REST and Connect JSON send; protobuf binary is smaller). Cached:
 * a commit shared by many streams is measured once.
 */
function eventBytes(e: ResourceEvent): number {
  let n = eventSizes.get(e);
  if (n === undefined) {
    n =
      128 +
      2 * e.at.length +
      Buffer.byteLength(e.identifier) +
      Buffer.byteLength(e.payloadType) +
      Buffer.byteLength(e.actor);
    if (e.resource !== undefined) n += 64 + Buffer.byteLength(JSON.stringify(e.resource));
    eventSizes.set(e, n);
  }
  return n;
}

/**
 * Cuts events (whole commits, commit order) into messages of at most
 * `maxBytes` (as eventBytes counts): whole commits while they fit; a commit
 * larger than that alone, in pieces, each but the last `partial` with `at`
 * just before the commit (beforeStamp). A single event larger than the
 * limit still goes, alone: it cannot be cut.
 */
function toMessages(events: readonly ResourceEvent[], maxBytes: number): EventMessage[] {
  const out: EventMessage[] = [];
  let batch: ResourceEvent[] = [];
  let bytes = 0;
  const flush = () => {
    const last = batch[batch.length - 1];
    if (last !== undefined) out.push({ at: last.at, events: batch });
    batch = [];
    bytes = 0;
  };
  for (let i = 0; i < events.length;) {
    const at = (events[i] as ResourceEvent).at;
    let j = i;
    let size = 0;
    while (j < events.length && (events[j] as ResourceEvent).at === at)
      size += eventBytes(events[j++] as ResourceEvent);
    const commit = events.slice(i, j);
    i = j;
    if (bytes + size > maxBytes) flush();
    if (size <= maxBytes) {
      batch.push(...commit);
      bytes += size;
      continue;
    }
    const before = beforeStamp(at);
    let piece: ResourceEvent[] = [];
    let pieceBytes = 0;
    for (const e of commit) {
      const b = eventBytes(e);
      if (piece.length > 0 && pieceBytes + b > maxBytes) {
        out.push({ at: before, events: piece, partial: true });
        piece = [];
        pieceBytes = 0;
      }
      piece.push(e);
      pieceBytes += b;
    }
    out.push({ at, events: piece });
  }
  flush();
  return out;
}

interface WatchOptions extends EventFilter {
  /** Already checked RFC 3339 (rpc/as-of.ts parseAsOf); exclusive. Unset = from now on. */
  readonly since?: string;
  /** A message with no events after this long without one. */
  readonly heartbeatMs: number;
  /** Ends the stream (client gone, server shutting down). */
  readonly signal?: AbortSignal;
  /** The caller's grants (section 18): only events it may see. Required: a stream never defaults to everything. */
  readonly grants: Grants;
}

/**
 * One stream message: whole commits; or a piece of one commit too large for
 * one message (`partial`, every piece but the last, `at` just before that
 * commit); or none (a heartbeat or a watermark at the read point).
 */
export interface EventMessage {
  readonly at: string;
  readonly events: readonly ResourceEvent[];
  readonly partial?: boolean;
}

export interface EventFeed {
  /**
   * Messages in commit order, pulled: the next page is read only when the
   * consumer asks for the next message, so a slow consumer costs a few pages.
   * The first message comes within one heartbeat (at once when there is
   * nothing to scan). Throws resource_exhausted past maxStreams.
   */
  watch(options: WatchOptions): AsyncGenerator<EventMessage, void, undefined>;
  /** Open streams now (for tests and metrics). */
  readonly openStreams: number;
  /** What the feed has read and how often streams left a tail, since it was made (for tests and metrics). */
  stats(): EventFeedStats;
  /** Ends every open watch (shutdown) and stops listening. */
  close(): Promise<void>;
}

/** Why a stream left its tail to read the history on its own (EventFeedStats.leftTail). */
type LeftTailReason = "lagging" | "untagged" | "error";

/**
 * Counts since the feed was made. A history read is one readHistoryPage()
 * that returned a page: `tailReads` by the shared tails (one per page of
 * new commits, whatever the number of streams joined), `streamReads` by
 * streams on their own (catching up, or after leaving a tail, each with its
 * filters). Many streams leaving their tail show as `streamReads` growing
 * with every commit times the streams.
 */
export interface EventFeedStats {
  readonly tailReads: number;
  readonly streamReads: number;
  /**
   * Streams that left a tail to read on their own until they join again:
   * `lagging` (its queue held MAX_QUEUED_PAGES unread pages, or it was behind
   * the page), `untagged` (its subtree was not tagged in the page), `error`
   * (the tail's read failed). A stream that ends is not counted.
   */
  readonly leftTail: Readonly<Record<LeftTailReason, number>>;
}

export interface EventFeedOptions {
  readonly db: Db;
  /** Wake-ups after commits; without them (or while they are down) the feed polls every pollMs. */
  readonly notifications?: Notifications;
  /** Versions per page (default 1000); a commit is never split across pages. */
  readonly pageSize?: number;
  /** Largest message (EVENTS_MAX_MESSAGE_BYTES, default 1 MiB): larger commits are split. */
  readonly maxMessageBytes?: number;
  /** Open streams per process (MAX_WATCH_STREAMS, default 1000); more: resource_exhausted. */
  readonly maxStreams?: number;
  /** How often the tails read while no notification can come (default 250 ms). */
  readonly pollMs?: number;
}

/** Checks a watch filter the way every surface does (invalid_argument). */
function checkEventFilter(filter: EventFilter): void {
  if (filter.rootIdentifier !== undefined) checkIdentifier(filter.rootIdentifier, "root_identifier");
  for (const t of filter.payloadTypes ?? []) payloadTypeOrThrow(t);
}

/**
 * Pages a joined stream may hold unread before it leaves the tail and
 * catches up on its own. The pages are the tail's, shared: a queue costs
 * memory only while the stream lags, and leaving the tail costs a read of
 * its own per page, so a burst of commits should not push streams out.
 */
const MAX_QUEUED_PAGES = 8;

interface TailPage {
  /** The tail's read point the page started from (exclusive). */
  readonly from: string;
  readonly page: HistoryPage;
  /** The roots its events were tagged with. */
  readonly tagged: ReadonlySet<string>;
  /**
   * The page's events cut into messages, made by the first stream that takes
   * the page whole (no type or subtree filter) and handed as the same objects
   * to every other such stream: the service encodes a message once
   * (rpc/event-service.ts), not once per stream.
   */
  whole?: EventMessage[];
}

/** A stream joined to a tail. */
interface Member {
  point: string;
  readonly root: string | undefined;
  readonly queue: TailPage[];
  /** Set when the tail let go of it: it reads on its own from its point after its queue. */
  detached: boolean;
  wake: () => void;
}

/** The shared reader of one grants key (and include_resources). */
interface Tail {
  readonly key: string;
  readonly grants: Grants;
  readonly withResources: boolean;
  /** Streams of this key, joined or still catching up, by subtree root they filter on (for tagging). */
  readonly roots: Map<string, number>;
  streams: number;
  readonly members: Set<Member>;
  /** Where the next read starts (the end of the last delivered page); undefined while nobody is joined. */
  point: string | undefined;
  reading: boolean;
  again: boolean;
}

export function createEventFeed(options: EventFeedOptions): EventFeed {
  const { db } = options;
  const pageSize = options.pageSize ?? 1000;
  const maxBytes = options.maxMessageBytes ?? 1_048_576;
  const maxStreams = options.maxStreams ?? 1000;
  const pollMs = options.pollMs ?? 250;
  const notifications = options.notifications;
  const closing = new AbortController();
  // Every open stream listens on it (AbortSignal.any): a thousand is expected, not a leak.
  setMaxListeners(0, closing.signal);
  const tails = new Map<string, Tail>();
  let open = 0;
  const counts = { tailReads: 0, streamReads: 0, leftTail: { lagging: 0, untagged: 0, error: 0 } };
  let subscription: Promise<(() => Promise<void>) | undefined> | undefined;
  let pollTimer: NodeJS.Timeout | undefined;

  const kickAll = () => {
    for (const t of tails.values()) kick(t);
  };

  // Subscribed once, lazily; the hub keeps listening again after failures
  // and says whether it listens now. A failed LISTEN never fails a watch:
  // until it is back, the tails poll. Once it listens, the hub calls kickAll
  // (notifications.ts): a commit notified before the LISTEN took effect, and
  // not yet polled (the poll stops when listening starts), is read then
  // rather than at the next commit or heartbeat.
  function listen(): void {
    if (subscription !== undefined || notifications === undefined) return;
    subscription = notifications.subscribe(EVENTS_CHANNEL, kickAll).catch(() => {
      subscription = undefined;
      return undefined;
    });
  }
  const listening = () => notifications?.listening(EVENTS_CHANNEL) === true;

  function schedulePoll(): void {
    if (pollTimer !== undefined || closing.signal.aborted || tails.size === 0) return;
    pollTimer = setTimeout(() => {
      pollTimer = undefined;
      if (!listening()) kickAll();
      schedulePoll();
    }, pollMs);
    pollTimer.unref?.();
  }

  function tailFor(grants: Grants, withResources: boolean): Tail {
    const key = `${withResources ? "r" : "-"}|${grantsKey(grants)}`;
    let t = tails.get(key);
    if (t === undefined) {
      t = {
        key,
        grants,
        withResources,
        roots: new Map(),
        streams: 0,
        members: new Set(),
        point: undefined,
        reading: false,
        again: false,
      };
      tails.set(key, t);
    }
    t.streams += 1;
    schedulePoll();
    return t;
  }

  function release(t: Tail, root: string | undefined): void {
    if (root !== undefined) {
      const n = (t.roots.get(root) ?? 1) - 1;
      if (n === 0) t.roots.delete(root);
      else t.roots.set(root, n);
    }
    t.streams -= 1;
    if (t.streams === 0) tails.delete(t.key);
  }

  /** Lets go of a member: `reason` when the tail pushes it out, none when its stream ends. */
  function detach(t: Tail, m: Member, reason?: LeftTailReason): void {
    if (reason !== undefined) counts.leftTail[reason] += 1;
    t.members.delete(m);
    m.detached = true;
    if (t.members.size === 0) t.point = undefined;
    m.wake();
  }

  /** Reads the new commits once for every member, as long as there are some. */
  function kick(t: Tail): void {
    if (t.reading) {
      t.again = true;
      return;
    }
    if (t.point === undefined || t.members.size === 0) return;
    t.reading = true;
    void (async () => {
      try {
        while (t.point !== undefined && t.members.size > 0 && !closing.signal.aborted) {
          t.again = false;
          const from = t.point;
          const tagged = new Set(t.roots.keys());
          const page = await readHistoryPage(
            db,
            t.grants,
            from,
            pageSize,
            { includeResources: t.withResources },
            { tagRoots: [...tagged] },
          );
          counts.tailReads += 1;
          if (t.point !== from) continue;
          t.point = page.upto;
          const delivered: TailPage = { from, page, tagged };
          for (const m of [...t.members]) {
            const queuedTo = m.queue[m.queue.length - 1]?.page.upto ?? m.point;
            const untagged = m.root !== undefined && !tagged.has(m.root);
            if (queuedTo < from || untagged || m.queue.length >= MAX_QUEUED_PAGES) {
              detach(t, m, queuedTo >= from && untagged ? "untagged" : "lagging");
              continue;
            }
            m.queue.push(delivered);
            m.wake();
          }
          if (!page.more && !t.again) break;
        }
      } catch {
        // The members read on their own, and meet the error themselves if it lasts.
        for (const m of [...t.members]) detach(t, m, "error");
      } finally {
        t.reading = false;
      }
    })();
  }

  async function* watch(opts: WatchOptions): AsyncGenerator<EventMessage, void, undefined> {
    checkEventFilter(opts);
    if (open >= maxStreams)
      throw resourceExhausted(
        `${maxStreams} change-feed streams are open in this process (MAX_WATCH_STREAMS); try again later`,
        "TOO_MANY_STREAMS",
      );
    open += 1;
    const signal = opts.signal ? AbortSignal.any([opts.signal, closing.signal]) : closing.signal;
    const grants = opts.grants;
    const withResources = opts.includeResources === true;
    const root = opts.rootIdentifier;
    const types =
      opts.payloadTypes !== undefined && opts.payloadTypes.length > 0 ? new Set(opts.payloadTypes) : undefined;
    const tail = tailFor(grants, withResources);
    if (root !== undefined) tail.roots.set(root, (tail.roots.get(root) ?? 0) + 1);
    let member: Member | undefined;
    let wakeUp: (() => void) | undefined;
    const onAbort = () => wakeUp?.();
    signal.addEventListener("abort", onAbort);
    try {
      listen();
      const start = await readPoint(db, opts.since);
      // Unset since = only commits after the read point of the moment the watch starts.
      let point: string = start.since ?? start.now;
      const startedAt = Date.now();
      let lastSent: number | undefined;
      /** Whether a message is due: the first, or a heartbeat's worth of quiet. */
      const due = () => Date.now() - (lastSent ?? startedAt - opts.heartbeatMs) >= opts.heartbeatMs;
      // Catching up on the past (a replay, or a page that was full) may run on a
      // standby that has replayed that far (store/replicas.ts); the tail reads
      // the primary, so a commit is delivered as soon as it is notified.
      let catchingUp = opts.since !== undefined;
      while (!signal.aborted) {
        if (member === undefined) {
          // On its own: the filters are in the SQL.
          const source = catchingUp ? await readerFor(db, point) : db;
          const page = await readHistoryPage(source, grants, point, pageSize, opts);
          counts.streamReads += 1;
          if (signal.aborted) return;
          catchingUp = page.more;
          point = page.upto;
          if (page.events.length > 0) {
            for (const m of toMessages(page.events, maxBytes)) yield m;
            lastSent = Date.now();
          } else if (due()) {
            // A watermark: what was scanned is done with, also for a resume.
            yield { at: point, events: [] };
            lastSent = Date.now();
          }
          if (page.more) continue;
          // At the live point: join the tail unless it has read past us meanwhile.
          if (tail.point === undefined || tail.point <= point) {
            const m: Member = { point, root, queue: [], detached: false, wake: () => wakeUp?.() };
            tail.point ??= point;
            tail.members.add(m);
            member = m;
            // A commit notified while this stream read on its own woke no one for it.
            kick(tail);
          }
          continue;
        }
        const m = member;
        const next = m.queue.shift();
        if (next === undefined) {
          if (m.detached) {
            member = undefined;
            point = m.point;
            continue;
          }
          const quietFor = Date.now() - (lastSent ?? startedAt - opts.heartbeatMs);
          if (quietFor >= opts.heartbeatMs) {
            // A lost notification costs about a heartbeat: look again now.
            kick(tail);
            yield { at: m.point, events: [] };
            lastSent = Date.now();
            continue;
          }
          await new Promise<void>((resolve) => {
            const timer = setTimeout(done, opts.heartbeatMs - quietFor);
            function done() {
              clearTimeout(timer);
              wakeUp = undefined;
              resolve();
            }
            wakeUp = done;
            if (signal.aborted || m.queue.length > 0 || m.detached) done();
          });
          continue;
        }
        // A stream without filters that had read up to where the page starts takes it whole.
        const whole = types === undefined && root === undefined && next.from >= m.point;
        const mine = whole
          ? next.page.events
          : next.page.events.filter(
              (e) =>
                e.at > m.point &&
                (types === undefined || types.has(e.payloadType)) &&
                (root === undefined || isUnder(e, root)),
            );
        if (next.page.upto > m.point) m.point = next.page.upto;
        if (mine.length > 0) {
          for (const msg of whole ? (next.whole ??= toMessages(mine, maxBytes)) : toMessages(mine, maxBytes)) yield msg;
          lastSent = Date.now();
        }
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      if (member !== undefined) detach(tail, member);
      release(tail, root);
      open -= 1;
    }
  }

  return {
    watch,
    get openStreams() {
      return open;
    },
    stats: () => ({ tailReads: counts.tailReads, streamReads: counts.streamReads, leftTail: { ...counts.leftTail } }),
    async close() {
      closing.abort();
      if (pollTimer !== undefined) clearTimeout(pollTimer);
      const off = await subscription;
      await off?.();
    },
  };
}
