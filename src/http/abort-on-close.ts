// A signal for the work of one request that stops when its client goes away.
import type { ServerResponse } from "node:http";
import type { Http2ServerResponse } from "node:http2";

/**
 * Aborted when the response closes before it was ended (the client went
 * away), with `reason()` as its reason (an AbortError without one).
 * `writableEnded`, not `writableFinished`: an Http2ServerResponse whose
 * stream the peer reset (a client killed, its socket closed by the kernel)
 * reports writableFinished true on close, so a gRPC Watch of a dead client
 * was never aborted and held its stream and its MAX_WATCH_STREAMS slot
 * (docs/events.md, "A client that goes away").
 */
export function abortOnClose(res: ServerResponse | Http2ServerResponse, reason?: () => unknown): AbortSignal {
  return abortOnCloseLazily(res, reason)();
}

/**
 * The same signal, made only when something asks for it: most unary calls
 * never do, and an AbortController a call cost a loaded service about 2% of
 * its CPU (docs/benchmarks/load.md, "The abort signal, on demand"). A
 * response that closed before it was ended, before the signal was asked
 * for, gives a signal already aborted.
 */
export function abortOnCloseLazily(
  res: ServerResponse | Http2ServerResponse,
  reason?: () => unknown,
): () => AbortSignal {
  let controller: AbortController | undefined;
  let gone = false;
  // `close` comes once per response: no need for once's wrapper.
  res.on("close", () => {
    if (res.writableEnded) return;
    gone = true;
    controller?.abort(reason?.());
  });
  return () => {
    if (controller === undefined) {
      controller = new AbortController();
      if (gone) controller.abort(reason?.());
    }
    return controller.signal;
  };
}
