// Writes a stream of google.api.HttpBody messages as one raw HTTP body. The
// status line waits for the first bytes so an early failure can still be a
// JSON error; after that, a failure destroys the response so the client
// sees a broken transfer instead of a silently truncated file.
import type { ServerResponse } from "node:http";
import type { Http2ServerResponse } from "node:http2";
import type { HttpBody } from "../../gen/google/api/httpbody_pb.js";

type AnyResponse = ServerResponse | Http2ServerResponse;

const DEFAULT_CONTENT_TYPE = "application/octet-stream";

/** Resolves when the response can take more, false if it closed first (or took nothing for `stallMs`). */
export function drained(res: AnyResponse, isClosed: () => boolean, stallMs?: number): Promise<boolean> {
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

export async function writeHttpBodyStream(
  res: AnyResponse,
  messages: AsyncIterable<HttpBody>,
  extraHeaders: Record<string, string>,
  stallMs?: number,
): Promise<void> {
  let contentType: string | undefined;
  // Http2ServerResponse has no `destroyed`; the close event serves both.
  let closed = false;
  res.once("close", () => {
    closed = true;
  });
  const isClosed = () => closed;
  const start = () => {
    (res as ServerResponse).writeHead(200, { ...extraHeaders, "content-type": contentType ?? DEFAULT_CONTENT_TYPE });
  };
  for await (const message of messages) {
    contentType ??= message.contentType === "" ? DEFAULT_CONTENT_TYPE : message.contentType;
    if (message.data.length === 0) continue;
    if (!res.headersSent) start();
    if (closed) return; // the client left; leaving the loop cancels the call
    const ok = (res as ServerResponse).write(message.data);
    if (!ok && !(await drained(res, isClosed, stallMs))) return;
  }
  if (!res.headersSent) start();
  res.end();
}
