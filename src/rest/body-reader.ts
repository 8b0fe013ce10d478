// Reads a JSON request body under a size limit: past the limit it stops
// buffering at once, so an oversized upload costs no memory.
import type { IncomingMessage } from "node:http";
import type { Http2ServerRequest } from "node:http2";
import { invalidArgument, resourceExhausted } from "../errors.js";

export type AnyRequest = IncomingMessage | Http2ServerRequest;

function tooLarge(maxBytes: number) {
  return resourceExhausted(`the request body is larger than ${maxBytes} bytes`);
}

/** The raw body bytes; rejects with resource_exhausted past maxBytes. */
export function readBody(req: AnyRequest, maxBytes: number): Promise<Buffer> {
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > maxBytes) {
    req.resume(); // drain without buffering so the answer reaches the client
    return Promise.reject(tooLarge(maxBytes));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (err: Error | undefined) => {
      if (done) return;
      done = true;
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      if (err) reject(err);
      else resolve(Buffer.concat(chunks, size));
    };
    const onData = (chunk: Buffer | string) => {
      const buf = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
      size += buf.length;
      if (size > maxBytes) {
        chunks.length = 0;
        req.resume();
        finish(tooLarge(maxBytes));
        return;
      }
      chunks.push(buf);
    };
    const onEnd = () => finish(undefined);
    const onError = (err: Error) => finish(err);
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
  });
}

/** Parses a body as JSON; an empty body is undefined (the rule's defaults apply). */
export function parseJsonBody(raw: Buffer): unknown {
  const text = raw.toString("utf8");
  if (text.trim() === "") return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    const detail = err instanceof SyntaxError ? `: ${err.message}` : "";
    throw invalidArgument(`the request body is not valid JSON${detail}`);
  }
}
