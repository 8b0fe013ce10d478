// `resource-store watch`: the change feed (API.md section 14) as NDJSON, one
// event a line, until interrupted; after a dropped connection it resumes with
// `since` = the last `at` received, so no event is lost or repeated.
//
// The feed itself (EventService.Watch and the client's `watch()`) comes with
// the events issue. This file holds the loop and the printing; it needs only
// a `WatchSource`, which src/cli/program.ts builds from the client once the
// client has `watch()` (see `watchSourceOf` there).
import { Code, ConnectError } from "@connectrpc/connect";
import type { Resource } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { resourceToFlat } from "../schema/flat-codec.js";
import { describeError, warn } from "./common.js";

export interface WatchRequestLike {
  readonly since?: string;
  readonly payloadTypes: string[];
  readonly rootIdentifier?: string;
  readonly includeResources?: boolean;
}

export interface WatchEventLike {
  readonly at: string;
  readonly identifier: string;
  readonly payloadType: string;
  readonly kind: string;
  readonly version: bigint | number;
  readonly resource?: Resource;
}

export interface WatchMessageLike {
  readonly at: string;
  readonly events: readonly WatchEventLike[];
}

/** Opens one stream of the feed; it ends or throws when the connection does. */
export type WatchSource = (req: WatchRequestLike, signal: AbortSignal) => AsyncIterable<WatchMessageLike>;

export interface WatchOptions {
  readonly since?: string;
  readonly payloadTypes: string[];
  readonly root?: string;
  readonly includeResources: boolean;
  /** Give up after this many reconnections in a row without a message (default: never). */
  readonly maxRetries?: number;
}

/** One NDJSON line for an event (resources flat, as REST writes them). */
export function eventLine(e: WatchEventLike): string {
  return `${JSON.stringify({
    at: e.at,
    identifier: e.identifier,
    payload_type: e.payloadType,
    kind: e.kind,
    version: Number(e.version),
    ...(e.resource !== undefined ? { resource: resourceToFlat(e.resource, { children: false }) } : {}),
  })}\n`;
}

const FATAL = new Set([Code.Unauthenticated, Code.PermissionDenied, Code.InvalidArgument, Code.FailedPrecondition, Code.NotFound, Code.Unimplemented]);

/** Prints events until `signal` aborts; returns how many were printed. */
export async function runWatch(
  source: WatchSource,
  opts: WatchOptions,
  signal: AbortSignal,
  write: (line: string) => void,
  url: string,
): Promise<number> {
  let since = opts.since;
  let printed = 0;
  let failures = 0;
  while (!signal.aborted) {
    try {
      const req: WatchRequestLike = {
        ...(since !== undefined ? { since } : {}),
        payloadTypes: opts.payloadTypes,
        ...(opts.root !== undefined ? { rootIdentifier: opts.root } : {}),
        includeResources: opts.includeResources,
      };
      for await (const msg of source(req, signal)) {
        failures = 0;
        for (const e of msg.events) {
          write(eventLine(e));
          printed++;
        }
        since = msg.at; // heartbeats move it too: a resume never replays what was already seen
      }
    } catch (err) {
      if (signal.aborted) break;
      if (err instanceof ConnectError && FATAL.has(err.code)) throw err;
      failures++;
      if (opts.maxRetries !== undefined && failures > opts.maxRetries) throw err;
      warn(`watch: connection lost (${describeError(err, url)}); resuming${since !== undefined ? ` after ${since}` : ""}`);
    }
    if (signal.aborted) break;
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, Math.min(10_000, 250 * 2 ** Math.min(failures, 6)));
      signal.addEventListener("abort", () => {
        clearTimeout(t);
        resolve();
      }, { once: true });
    });
  }
  return printed;
}
