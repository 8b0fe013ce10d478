// watch(): the change feed as an async iterator that survives dropped
// connections. It remembers the `at` of the last message it handed out
// (heartbeats included, so a quiet feed does not replay from far back) and,
// when the stream breaks, opens a new one with since = that `at`: the server
// then sends every later commit once (API.md section 14).
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import type { WatchResponse } from "../../gen/resourcestore/type/v1/event_pb.js";
import { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";

export interface WatchParams {
  /** RFC 3339, exclusive; unset = from now on. */
  readonly since?: string;
  readonly payloadTypes?: readonly string[];
  readonly rootIdentifier?: string;
  readonly includeResources?: boolean;
  /** Yield heartbeats (messages with no events) too; default false. */
  readonly heartbeats?: boolean;
  /** Stops the iterator. */
  readonly signal?: AbortSignal;
  /** Wait before reconnecting, doubled on each failure in a row up to 30 s (default 250 ms). */
  readonly retryMs?: number;
  /** Told about each broken stream before it is resumed. */
  readonly onRetry?: (err: ConnectError, since: string | undefined) => void;
}

/** Errors that resuming cannot cure: the request or the credentials are wrong. */
const FATAL = new Set<Code>([Code.InvalidArgument, Code.Unauthenticated, Code.PermissionDenied, Code.Unimplemented, Code.FailedPrecondition]);

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

export async function* watchEvents(transport: Transport, params: WatchParams = {}): AsyncGenerator<WatchResponse, void, undefined> {
  const client = createClient(EventService, transport);
  let since = params.since;
  const base = params.retryMs ?? 250;
  let delay = base;
  const aborted = (): boolean => params.signal?.aborted === true;
  while (!aborted()) {
    try {
      const stream = client.watch(
        {
          ...(since !== undefined ? { since } : {}),
          payloadTypes: [...(params.payloadTypes ?? [])],
          ...(params.rootIdentifier !== undefined ? { rootIdentifier: params.rootIdentifier } : {}),
          includeResources: params.includeResources === true,
        },
        { ...(params.signal ? { signal: params.signal } : {}) },
      );
      for await (const message of stream) {
        delay = base;
        since = message.at;
        if (message.events.length > 0 || params.heartbeats === true) yield message;
      }
      // The server ended the stream (shutting down): resume elsewhere or later.
    } catch (err) {
      if (aborted()) return;
      const e = ConnectError.from(err);
      if (FATAL.has(e.code)) throw e;
      params.onRetry?.(e, since);
    }
    await sleep(delay, params.signal);
    delay = Math.min(delay * 2, 30_000);
  }
}
