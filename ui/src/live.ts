// "Now" is live: while the view reads now, one change feed
// (docs/contract/14-events.md, with each event's resource) runs in the
// background and tells the panels what changed, so a new version or a new
// child written while the page is open appears without a reload. In a past
// view nothing changes, and the feed is closed.
import type { Event } from "../../gen/resourcestore/type/v1/event_pb.js";
import { watchEvents } from "../../src/client/browser.js";
import { transport } from "./api.js";
import { asOf, subscribe } from "./state.js";

type LiveListener = (events: readonly Event[]) => void;
const listeners: LiveListener[] = [];
let controller: AbortController | undefined;

export function onLiveChanges(l: LiveListener): void {
  listeners.push(l);
}

/** Events are told in bursts at most this often: a batch of writes reads the page again once, not per commit. */
const BURST_MS = 300;
let pending: Event[] = [];
let timer: number | undefined;

function flush(): void {
  timer = undefined;
  const events = pending;
  pending = [];
  if (asOf() === undefined) for (const l of listeners) l(events);
}

async function follow(signal: AbortSignal): Promise<void> {
  try {
    for await (const message of watchEvents(transport, { includeResources: true, signal, maxRetries: 20 })) {
      if (message.events.length === 0) continue;
      pending.push(...message.events);
      timer ??= window.setTimeout(flush, BURST_MS);
    }
  } catch {
    // The page still works as a snapshot; "Now" (or signing in) reads again and follows again.
  }
  if (controller?.signal === signal) controller = undefined;
}

function sync(): void {
  const live = asOf() === undefined;
  if (live && controller === undefined) {
    controller = new AbortController();
    void follow(controller.signal);
  } else if (!live && controller !== undefined) {
    controller.abort();
    controller = undefined;
  }
}

/** Starts following (when the view reads now) and keeps following the read point. */
export function startLive(): void {
  subscribe(sync);
  sync();
}
