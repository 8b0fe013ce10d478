// Writes a stream of google.api.HttpBody messages as one raw HTTP body. The
// status line waits for the first bytes so an early failure can still be a
// JSON error; after that, a failure destroys the response so the client
// sees a broken transfer instead of a silently truncated file.
import type { ServerResponse } from "node:http";
import type { Http2ServerResponse } from "node:http2";
import type { HttpBody } from "../../gen/google/api/httpbody_pb.js";
import { drained } from "../http/drained.js";

type AnyResponse = ServerResponse | Http2ServerResponse;

const DEFAULT_CONTENT_TYPE = "application/octet-stream";

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
