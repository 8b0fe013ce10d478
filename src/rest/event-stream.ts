// GET /events as Server-Sent Events (docs/contract/14-events.md). Each stream message
// is one SSE event: `id: <at>` and `data: <WatchResponse as flat JSON>`. An
// empty message (a heartbeat) is `id: <at>` and a `: heartbeat` comment: no
// event fires, but the browser's EventSource takes the id, so a reconnect's
// Last-Event-ID is the read point even after a long quiet spell. A piece of
// a split commit (`partial`) has the `at` just before that commit, so its id
// makes a reconnect send the whole commit again, never its second half alone.
import type { ServerResponse } from "node:http";
import type { Http2ServerResponse } from "node:http2";
import type { DescMessage, DescMethod } from "@bufbuild/protobuf";
import type { WatchResponse } from "../../gen/resourcestore/type/v1/event_pb.js";
import { ConnectError } from "@connectrpc/connect";
import { drained } from "../http/drained.js";
import { restErrorOf } from "../http/error-status.js";
import type { AnyRequest } from "../http/read-body.js";
import { messageToRest } from "./response-encoder.js";

type AnyResponse = ServerResponse | Http2ServerResponse;

const WATCH_RESPONSE = "resourcestore.type.v1.WatchResponse";

/** Whether a server-streaming method answers REST as an event stream. */
export function isEventStream(method: DescMethod): boolean {
  return method.methodKind === "server_streaming" && method.output.typeName === WATCH_RESPONSE;
}

/**
 * The REST spellings of the watch request: `payload_type` may repeat (the
 * field is `payload_types`), and a `Last-Event-ID` header stands for `since`
 * (and wins over one in the query).
 */
export function eventStreamQuery(req: AnyRequest, query: URLSearchParams): URLSearchParams {
  const out = new URLSearchParams();
  for (const [k, v] of query) out.append(k === "payload_type" ? "payload_types" : k, v);
  const last = req.headers["last-event-id"];
  const lastId = Array.isArray(last) ? last[0] : last;
  // Last-Event-ID wins over a since in the URL: EventSource reconnects to the
  // very URL it opened, and must resume there, not replay from the URL's since.
  if (lastId !== undefined && lastId.trim() !== "") out.set("since", lastId.trim());
  return out;
}

function frame(output: DescMessage, message: WatchResponse): string {
  const id = `id: ${message.at}\n`;
  if (message.events.length === 0) return `${id}: heartbeat\n\n`;
  return `${id}data: ${JSON.stringify(messageToRest(output, message, { children: false }))}\n\n`;
}

/**
 * Writes the stream. The first message is awaited before the status line
 * (the feed sends one at once), so a bad request is still a JSON error.
 */
export async function writeEventStream(
  res: AnyResponse,
  output: DescMessage,
  messages: AsyncIterable<WatchResponse>,
  extraHeaders: Record<string, string>,
): Promise<void> {
  let closed = false;
  res.once("close", () => {
    closed = true;
  });
  const isClosed = () => closed;
  const it = messages[Symbol.asyncIterator]();
  try {
    let next = await it.next();
    (res as ServerResponse).writeHead(200, {
      ...extraHeaders,
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      "x-accel-buffering": "no",
    });
    while (next.done !== true) {
      if (closed) return;
      const ok = (res as ServerResponse).write(frame(output, next.value));
      // Pull-based: the next page is read only once this one is taken.
      if (!ok && !(await drained(res, isClosed))) return;
      try {
        next = await it.next();
      } catch (err) {
        // The status line is gone: a stream ended by the service (a token that
        // expired, say) says why in a last `error` event, then ends.
        if (closed || !(err instanceof ConnectError)) throw err;
        res.end(`event: error\ndata: ${JSON.stringify(restErrorOf(err).body)}\n\n`);
        return;
      }
    }
    res.end();
  } finally {
    // A client that left ends the call (and its database reads).
    if (closed) await it.return?.(undefined);
  }
}
