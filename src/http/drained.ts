// Waiting for a response that has taken all it can (write() returned
// false): the REST body and event streams and the feed lane's gRPC streams.
import type { ServerResponse } from "node:http";
import type { Http2ServerResponse } from "node:http2";

/** Resolves when the response can take more, false if it closed first (or took nothing for `stallMs`). */
export function drained(
  res: ServerResponse | Http2ServerResponse,
  isClosed: () => boolean,
  stallMs?: number,
): Promise<boolean> {
  return new Promise((resolve) => {
    if (isClosed()) {
      resolve(false);
      return;
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    const onDrain = () => {
      clearTimeout(timer);
      res.off("close", onClose);
      resolve(true);
    };
    const onClose = () => {
      clearTimeout(timer);
      res.off("drain", onDrain);
      resolve(false);
    };
    res.once("drain", onDrain);
    res.once("close", onClose);
    if (stallMs !== undefined) {
      timer = setTimeout(() => {
        res.off("drain", onDrain);
        res.off("close", onClose);
        // A stalled client: close its stream, the transfer shows as broken.
        if ("stream" in res) res.stream.close(0x8);
        else res.destroy();
        resolve(false);
      }, stallMs);
    }
  });
}
