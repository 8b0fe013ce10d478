// Reads a request body under a size limit: past the limit it stops
// buffering at once, so an oversized upload costs no memory. The REST
// gateway and the unary lane (rpc/unary-lane.ts) both read bodies here.
import type { IncomingMessage } from "node:http";
import { promisify } from "node:util";
import { brotliDecompress, gunzip } from "node:zlib";
import type { Http2ServerRequest } from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { invalidArgument, resourceExhausted, unsupportedContentEncoding } from "../errors.js";

export type AnyRequest = IncomingMessage | Http2ServerRequest;

function tooLarge(maxBytes: number) {
  return resourceExhausted(`the request body is larger than ${maxBytes} bytes`, "BODY_TOO_LARGE");
}

/**
 * The raw body bytes; rejects with resource_exhausted past maxBytes, and
 * with canceled when the client goes away before the body is complete.
 */
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
      req.off("close", onClose);
      if (err) reject(err);
      else resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
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
    const onClose = () => finish(new ConnectError("the client went away before its request was complete", Code.Canceled));
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    req.on("close", onClose);
  });
}

const DECOMPRESS = { gzip: promisify(gunzip), br: promisify(brotliDecompress) } as const;

/**
 * The body bytes as sent, decompressed when its content-encoding is gzip or
 * br (the encodings the RPC surfaces accept): the compressed bytes and the
 * decompressed ones each under maxBytes. Another encoding is refused before
 * the body is read (UNSUPPORTED_MEDIA_TYPE); bytes that are not valid data of
 * the named encoding are MALFORMED_BODY.
 */
export async function readDecodedBody(req: AnyRequest, maxBytes: number): Promise<Buffer> {
  const declared = req.headers["content-encoding"]?.trim().toLowerCase();
  if (declared === undefined || declared === "" || declared === "identity") return readBody(req, maxBytes);
  if (declared !== "gzip" && declared !== "br") {
    req.resume();
    throw unsupportedContentEncoding(declared);
  }
  const raw = await readBody(req, maxBytes);
  if (raw.length === 0) return raw;
  try {
    return await DECOMPRESS[declared](raw, { maxOutputLength: maxBytes });
  } catch (err) {
    if ((err as { code?: unknown }).code === "ERR_BUFFER_TOO_LARGE") {
      throw resourceExhausted(`the request body is larger than ${maxBytes} bytes once decompressed`, "BODY_TOO_LARGE");
    }
    throw invalidArgument(`the request body is not valid ${declared} data (as its content-encoding header says)`, "MALFORMED_BODY");
  }
}

/** True when the request may carry a body (declared length > 0 or chunked). */
export function hasBody(req: AnyRequest): boolean {
  const len = req.headers["content-length"];
  if (len !== undefined) return Number(len) > 0;
  if (req.headers["transfer-encoding"] !== undefined) return true;
  // HTTP/2 without a length: a body exists unless the HEADERS frame ended the stream.
  return "stream" in req ? !req.stream.readableEnded && req.method !== "GET" && req.method !== "HEAD" : false;
}
