// The change feed as an async iterator that survives dropped connections:
// the one resume implementation of the project, used by the client's
// `watch()`, the `resource-store watch` command and the explorer's live panel
// (docs/command-line.md, `watch`). It needs only @connectrpc/connect and the
// generated descriptors, so it runs in a browser as well as in Node.
//
// Where it resumes: from the `at` of the last message that closed a commit
// (heartbeats and watermarks included, so a quiet feed does not replay from
// far back). A commit larger than the service's EVENTS_MAX_MESSAGE_BYTES comes
// in several messages, all but the last with `partial: true` and the same
// `at` (one microsecond before the commit's stamp); such an `at` is never a
// resume point here, since the message may have been cut short. After a drop in the middle
// of a split commit the service sends that commit again from its start: the
// events of it already handed out are dropped (by identifier and version), so
// every event is yielded once. Partial messages are passed on as they come
// (a consumer that wants whole commits groups them by `partial`), so memory
// stays bounded by one commit's keys, not its resources.
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import type { Event, WatchResponse } from "../../gen/resourcestore/type/v1/event_pb.js";
import { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";

export interface WatchParams {
  /** RFC 3339, exclusive; unset = from now on. */
  readonly since?: string;
  readonly payloadTypes?: readonly string[];
  readonly rootIdentifier?: string;
  readonly includeResources?: boolean;
  /** Yield heartbeats and watermarks (messages with no events) too; default false. */
  readonly heartbeats?: boolean;
  /** Stops the iterator (it then returns, without an error). */
  readonly signal?: AbortSignal;
  /** Wait before reconnecting, doubled on each failure in a row (default 250 ms). */
  readonly retryMs?: number;
  /** The longest wait between two attempts (default 10 s). */
  readonly maxRetryMs?: number;
  /** Give up (throw the last error) after this many failures in a row without a message; default never. */
  readonly maxRetries?: number;
  /** Told about each broken stream before it is resumed, with the point it resumes from. */
  readonly onRetry?: (err: ConnectError, since: string | undefined) => void;
}

/**
 * Errors that resuming cannot cure, decided once for every client: the
 * credentials (unauthenticated, permission_denied) or the request
 * (invalid_argument, not_found, failed_precondition, out_of_range) are wrong,
 * or the service has no feed (unimplemented). Everything else is retried
 * with backoff: unavailable, resource_exhausted (MAX_WATCH_STREAMS),
 * deadline_exceeded, internal, unknown, aborted, a stream cancelled by the
 * network, and errors of the network itself.
 */
export const FINAL_WATCH_CODES: ReadonlySet<Code> = new Set([
  Code.Unauthenticated,
  Code.PermissionDenied,
  Code.InvalidArgument,
  Code.NotFound,
  Code.FailedPrecondition,
  Code.OutOfRange,
  Code.Unimplemented,
]);

export function isFinalWatchError(err: unknown): boolean {
  return FINAL_WATCH_CODES.has(ConnectError.from(err).code);
}

/** The request of one stream. */
export interface WatchStreamRequest {
  readonly since?: string;
  readonly payloadTypes: string[];
  readonly rootIdentifier?: string;
  readonly includeResources: boolean;
}

/** Opens one stream of the feed; it ends or throws when the connection does. */
export type WatchOpener = (req: WatchStreamRequest, signal: AbortSignal | undefined) => AsyncIterable<WatchResponse>;

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

const eventKey = (e: Event): string => `${e.identifier}\u0000${String(e.version)}`;

/** The feed through `open`, resumed after every failure that is not final. */
export async function* followFeed(
  open: WatchOpener,
  params: WatchParams = {},
): AsyncGenerator<WatchResponse, void, undefined> {
  const signal = params.signal;
  const base = params.retryMs ?? 250;
  const cap = Math.max(base, params.maxRetryMs ?? 10_000);
  let since = params.since;
  let delay = base;
  let failures = 0;
  /** The commit being received in parts, and the events of it already yielded. */
  let splitAt: string | undefined;
  let yielded = new Set<string>();
  const aborted = (): boolean => signal?.aborted === true;
  while (!aborted()) {
    try {
      const stream = open(
        {
          ...(since !== undefined ? { since } : {}),
          payloadTypes: [...(params.payloadTypes ?? [])],
          ...(params.rootIdentifier !== undefined ? { rootIdentifier: params.rootIdentifier } : {}),
          includeResources: params.includeResources === true,
        },
        signal,
      );
      for await (const message of stream) {
        delay = base;
        failures = 0;
        // A service older than split commits never sets it: every message then closes its commits.
        const partial = message.partial;
        let events = message.events;
        // A split commit sent again after a resume: leave out what was yielded the first time.
        if (splitAt !== undefined && yielded.size > 0)
          events = events.filter((e) => e.at !== splitAt || !yielded.has(eventKey(e)));
        if (partial) {
          // The split commit is the message's last: its stamp is its events' `at` (the message's own `at`
          // is the point just before that commit, so that resuming from it sends the commit again).
          const commitAt = message.events.at(-1)?.at ?? message.at;
          if (splitAt !== commitAt) {
            splitAt = commitAt;
            yielded = new Set();
          }
          for (const e of events) yielded.add(eventKey(e));
        } else {
          // The message closes every commit it holds: its `at` is a resume point.
          splitAt = undefined;
          yielded = new Set();
          since = message.at;
        }
        if (events.length > 0) yield events === message.events ? message : { ...message, events };
        else if (!partial && params.heartbeats === true) yield message;
      }
      // The service ended the stream (shutting down): resume elsewhere or later.
    } catch (err) {
      if (aborted()) return;
      const e = ConnectError.from(err);
      if (FINAL_WATCH_CODES.has(e.code)) throw e;
      failures++;
      if (params.maxRetries !== undefined && failures > params.maxRetries) throw e;
      params.onRetry?.(e, since);
    }
    await sleep(delay, signal);
    delay = Math.min(delay * 2, cap);
  }
}

/** The feed of the service behind `transport` (EventService of the second revision). */
export function watchEvents(
  transport: Transport,
  params: WatchParams = {},
): AsyncGenerator<WatchResponse, void, undefined> {
  const client = createClient(EventService, transport);
  return followFeed((req, signal) => client.watch(req, signal !== undefined ? { signal } : {}), params);
}
