// A signal for the work of one request that stops when its client goes away.
import type { ServerResponse } from "node:http";
import type { Http2ServerResponse } from "node:http2";

/**
 * Aborted when the response closes before it was sent in full (the client
 * went away), with `reason()` as its reason (an AbortError without one).
 */
export function abortOnClose(res: ServerResponse | Http2ServerResponse, reason?: () => unknown): AbortSignal {
  const controller = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) controller.abort(reason?.());
  });
  return controller.signal;
}
