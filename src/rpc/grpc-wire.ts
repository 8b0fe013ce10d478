// What the unary lane (unary-lane.ts) and the feed lane (feed-lane.ts) both
// do on the wire in connect's stead: which gRPC requests are the plain case,
// the one request message, the answer's compression and envelopes, Node's
// header objects. One copy, so the two lanes take the same requests and
// frame their answers alike.
import type { IncomingMessage } from "node:http";
import type { Http2ServerRequest } from "node:http2";
import {
  create,
  type DescMessage,
  type DescMethod,
  type DescService,
  type Message,
  type MessageShape,
} from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createServiceImplSpec,
  type ContextValues,
  type MethodImplSpec,
} from "@connectrpc/connect";
import { compressionNegotiate, type Compression, type Serialization } from "@connectrpc/connect/protocol";
import { internal } from "../errors.js";
import { readBody } from "../http/read-body.js";
import { plannedFromBinary } from "../protobuf/index.js";
import { malformedBodyReason, notAMessage } from "./body-marks.js";

/**
 * The methods of `kind` that the handler objects (by service type name)
 * implement, by method (as the front door resolves a request's path), each
 * with connect's spec of it: what a lane serves in connect's stead.
 */
export function implementedMethods<K extends MethodImplSpec["kind"]>(
  services: readonly DescService[],
  impls: ReadonlyMap<string, object>,
  kind: K,
): Map<DescMethod, MethodImplSpec & { kind: K }> {
  const out = new Map<DescMethod, MethodImplSpec & { kind: K }>();
  for (const service of services) {
    const impl = impls.get(service.typeName);
    if (impl === undefined) continue;
    const spec = createServiceImplSpec(service, impl);
    for (const method of service.methods) {
      if (method.methodKind !== kind || typeof (impl as Record<string, unknown>)[method.localName] !== "function")
        continue;
      out.set(method, spec.methods[method.localName] as MethodImplSpec & { kind: K });
    }
  }
  return out;
}

/** Smaller answers are not compressed (connect's default compressMinBytes). */
export const COMPRESS_MIN_BYTES = 1024;

export const GRPC_PROTO_TYPE = /^application\/grpc(?:\+proto)?$/i;

/** Node's header object from Headers (set-cookie stays a list). */
export function nodeHeaders(header: Headers): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  header.forEach((value, name) => {
    out[name] = value;
  });
  const cookies = header.getSetCookie();
  if (cookies.length > 0) out["set-cookie"] = cookies;
  return out;
}

/** What connect answers for a failure that is not a ConnectError. */
export function asConnectError(e: unknown): ConnectError {
  return e instanceof ConnectError ? e : internal(e);
}

/** An absent or `identity` content encoding: an uncompressed body. */
export function isIdentity(encoding: string | string[] | undefined): boolean {
  return encoding === undefined || String(encoding).toLowerCase() === "identity";
}

/** The compression for the answer the client accepts, or null; undefined when connect must answer (it would refuse). */
export function answerCompression(
  accept: readonly Compression[],
  accepted: string | string[] | undefined,
  headerName: string,
): Compression | null | undefined {
  const value = Array.isArray(accepted) ? accepted.join(",") : (accepted ?? null);
  const negotiated = compressionNegotiate([...accept], null, value, headerName);
  return negotiated.error !== undefined ? undefined : negotiated.response;
}

/**
 * For a gRPC request with a protobuf content type: the answer's compression
 * (or null) when it is the plain case a lane serves (HTTP/2, an
 * uncompressed request, no deadline header, a compression connect would
 * accept); undefined when connect must answer it.
 */
export function plainGrpcCompression(
  req: IncomingMessage | Http2ServerRequest,
  accept: readonly Compression[],
): Compression | null | undefined {
  const h = req.headers;
  if (req.httpVersionMajor !== 2 || h["grpc-timeout"] !== undefined || !isIdentity(h["grpc-encoding"]))
    return undefined;
  return answerCompression(accept, h["grpc-accept-encoding"], "grpc-accept-encoding");
}

/** The bytes of the one uncompressed message of a gRPC request body (at most readMaxBytes), or undefined when the body is not exactly that. */
export async function readGrpcMessage(
  req: IncomingMessage | Http2ServerRequest,
  readMaxBytes: number,
): Promise<Uint8Array | undefined> {
  // One message and its 5-byte envelope prefix.
  const bytes = await readBody(req, readMaxBytes + 5);
  const one = bytes.length >= 5 && bytes[0] === 0 && bytes.readUInt32BE(1) === bytes.length - 5;
  return one ? bytes.subarray(5) : undefined;
}

/** A gRPC envelope of `body`, compressed when a compression is given and the body is at least COMPRESS_MIN_BYTES. */
export async function grpcEnvelope(body: Uint8Array, compression: Compression | null): Promise<Buffer> {
  const compress = compression !== null && body.byteLength >= COMPRESS_MIN_BYTES;
  const out = compress ? await compression.compress(body) : body;
  const envelope = Buffer.allocUnsafe(5 + out.byteLength);
  envelope[0] = compress ? 1 : 0;
  envelope.writeUInt32BE(out.byteLength, 1);
  envelope.set(out, 5);
  return envelope;
}

/**
 * A binary request message decoded by its plan (the same message as
 * connect's fromBinary), within the limit connect's parse checks. Bytes that
 * are missing, too large or not a message of `desc` mark the call
 * (malformedBodyReason), whose interceptor answers invalid_argument with a
 * request id and a log line as on every other wire, and give an empty one.
 */
export function parseBinaryMessage<Desc extends DescMessage>(
  desc: Desc,
  bytes: Uint8Array | undefined,
  readMaxBytes: number,
  contextValues: ContextValues,
): MessageShape<Desc> {
  if (bytes !== undefined && bytes.byteLength <= readMaxBytes) {
    try {
      return plannedFromBinary(desc, bytes);
    } catch {
      // marked below
    }
  }
  contextValues.set(malformedBodyReason, notAMessage(desc.typeName));
  return create(desc);
}

/** protobuf-es's message for a JSON key its message does not have. */
const UNKNOWN_KEY = /: key "(?:[^"\\]|\\.)*" is unknown$/;

/**
 * A unary Connect JSON request decoded by connect's own JSON serialization
 * (so with the router's JSON options), or undefined when the body does not
 * decode: then the call is marked (malformedBodyReason, connect's message),
 * and its interceptor answers invalid_argument with a request id and a log
 * line. Any other failure is thrown.
 */
export function decodeJsonMessage(
  input: Serialization<Message>,
  bytes: Uint8Array,
  contextValues: ContextValues,
): Message | undefined {
  try {
    return input.parse(bytes);
  } catch (e) {
    const error = ConnectError.from(e);
    if (error.code !== Code.InvalidArgument) throw error;
    // protobuf-es names a key the message does not have: the same refusal as REST's (UNKNOWN_FIELD).
    contextValues.set(malformedBodyReason, {
      message: error.rawMessage,
      reason: UNKNOWN_KEY.test(error.rawMessage) ? "UNKNOWN_FIELD" : "MALFORMED_BODY",
    });
    return undefined;
  }
}
