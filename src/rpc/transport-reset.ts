// A call's way to end its own exchange at the transport, for when the client
// can no longer be told anything: a stalled export (EXPORT_STALL_MS) whose
// client reads nothing would never receive an error status queued behind the
// bytes it does not read. Over HTTP/2 the call's stream is reset with
// RST_STREAM(CANCEL), which is not flow-controlled, so the client sees it at
// once and the session's other streams go on; over HTTP/1.1 the connection,
// which carries only this call, is closed.
import { createContextKey } from "@connectrpc/connect";
import type { ServerResponse } from "node:http";
import { constants, type Http2ServerResponse } from "node:http2";

/** Set by the Node adapter on every call it serves; unset for calls made in process (the REST gateway ends those itself). */
export const resetTransport = createContextKey<(() => void) | undefined>(undefined, {
  description: "reset the call's HTTP/2 stream or HTTP/1.1 connection",
});

export function transportReset(res: ServerResponse | Http2ServerResponse): () => void {
  return () => {
    if ("stream" in res) {
      if (!res.stream.destroyed) res.stream.close(constants.NGHTTP2_CANCEL);
    } else {
      res.destroy();
    }
  };
}
