// `resource-store watch`: the change feed (docs/contract/14-events.md) as NDJSON, one
// event a line, until interrupted. Resuming after a dropped connection (and
// which errors end the command) is the client library's `watch()`
// (src/client/watch.ts), the same as every other client of the feed; this
// file only prints.
import type { Resource } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { resourceToFlat } from "../schema/flat-codec.js";
import type { ResourceStoreClient } from "../client/index.js";
import { describeError, warn } from "./common.js";

interface WatchEventLike {
  readonly at: string;
  readonly identifier: string;
  readonly payloadType: string;
  readonly kind: string;
  readonly version: bigint | number;
  readonly resource?: Resource;
}

export interface WatchOptions {
  readonly since?: string;
  readonly payloadTypes: string[];
  readonly root?: string;
  readonly includeResources: boolean;
  /** Give up after this many reconnections in a row without a message (default: never). */
  readonly maxRetries?: number;
}

/** One NDJSON line for an event (resources flat, as REST writes them). */
function eventLine(e: WatchEventLike): string {
  return `${JSON.stringify({
    at: e.at,
    identifier: e.identifier,
    payload_type: e.payloadType,
    kind: e.kind,
    version: Number(e.version),
    ...(e.resource !== undefined ? { resource: resourceToFlat(e.resource, { children: false }) } : {}),
  })}\n`;
}

/** Prints events until `signal` aborts; returns how many were printed. A final error (bad token, bad filter) is thrown. */
export async function runWatch(
  client: Pick<ResourceStoreClient, "watch">,
  opts: WatchOptions,
  signal: AbortSignal,
  write: (line: string) => void,
  url: string,
): Promise<number> {
  let printed = 0;
  const feed = client.watch({
    ...(opts.since !== undefined ? { since: opts.since } : {}),
    payloadTypes: opts.payloadTypes,
    ...(opts.root !== undefined ? { rootIdentifier: opts.root } : {}),
    includeResources: opts.includeResources,
    ...(opts.maxRetries !== undefined ? { maxRetries: opts.maxRetries } : {}),
    signal,
    onRetry: (err, since) =>
      warn(
        `watch: connection lost (${describeError(err, url)}); resuming${since !== undefined ? ` after ${since}` : ""}`,
      ),
  });
  for await (const msg of feed) {
    for (const e of msg.events) {
      write(eventLine(e));
      printed++;
    }
  }
  return printed;
}
