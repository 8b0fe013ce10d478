// Reads a request body under a size limit: past the limit it stops
// buffering at once, so an oversized upload costs no memory. The REST
// gateway and the unary lane (rpc/unary-lane.ts) both read bodies here.
import type { IncomingMessage } from "node:http";
import type { Http2ServerRequest } from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Compression } from "@connectrpc/connect/protocol";
import { canceled, invalidArgument, resourceExhausted, unsupportedContentEncoding } from "../errors.js";

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
    const onClose = () => finish(canceled("the client went away before its request was complete"));
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    req.on("close", onClose);
  });
}

export type Decompressed =
  { readonly bytes: Uint8Array } | { readonly malformed: string } | { readonly tooLarge: true };

/**
 * Compressed bytes of a request (`what`: "the request body", "a request
 * message"), decompressed within maxBytes by the compression `header` names.
 * Bytes that are not valid data of the compression (a corrupt or cut
 * stream) are malformed input, said as such, where connect answers a cut
 * gzip stream with internal; a result over the limit is tooLarge, for the
 * caller to refuse (or leave to connect, which answers resource_exhausted).
 */
export async function decompress(
  compression: Compression,
  bytes: Uint8Array,
  maxBytes: number,
  what: string,
  header: string,
): Promise<Decompressed> {
  try {
    return { bytes: await compression.decompress(bytes, maxBytes) };
  } catch (e) {
    if (ConnectError.from(e).code === Code.ResourceExhausted) return { tooLarge: true };
    return { malformed: `${what} is not valid ${compression.name} data (as its ${header} header says)` };
  }
}

/**
 * The body bytes as sent, decompressed when its content-encoding is one of
 * `offered` (the compressions the RPC surfaces accept): the compressed bytes
 * and the decompressed ones each under maxBytes. Another encoding is refused
 * before the body is read (UNSUPPORTED_MEDIA_TYPE); bytes that are not valid
 * data of the named encoding are MALFORMED_BODY.
 */
export async function readDecodedBody(
  req: AnyRequest,
  maxBytes: number,
  offered: readonly Compression[],
): Promise<Buffer> {
  const declared = req.headers["content-encoding"]?.trim().toLowerCase();
  if (declared === undefined || declared === "" || declared === "identity") return readBody(req, maxBytes);
  const compression = offered.find((c) => c.name === declared);
  if (compression === undefined) {
    req.resume();
    throw unsupportedContentEncoding(
      declared,
      offered.map((c) => c.name),
    );
  }
  const plain = await decompress(
    compression,
    await readBody(req, maxBytes),
    maxBytes,
    "the request body",
    "content-encoding",
  );
  if ("tooLarge" in plain)
    throw resourceExhausted(`the request body is larger than ${maxBytes} bytes once decompressed`, "BODY_TOO_LARGE");
  if ("malformed" in plain) throw invalidArgument(plain.malformed, "MALFORMED_BODY");
  return Buffer.from(plain.bytes.buffer, plain.bytes.byteOffset, plain.bytes.byteLength);
}

/** True when the request may carry a body (declared length > 0 or chunked). */
export function hasBody(req: AnyRequest): boolean {
  const len = req.headers["content-length"];
  if (len !== undefined) return Number(len) > 0;
  if (req.headers["transfer-encoding"] !== undefined) return true;
  // HTTP/2 without a length: a body exists unless the HEADERS frame ended the stream.
  return "stream" in req ? !req.stream.readableEnded && req.method !== "GET" && req.method !== "HEAD" : false;
}
