// connect-es answers a protobuf binary body it cannot parse with `internal`
// (HTTP 500), before any interceptor runs. per docs/errors.md malformed input must
// be invalid_argument. This guard sits between the Node adapter and the
// router's handlers. A call whose request is one message (unary and
// server-streaming methods) has its uncompressed binary body read and parsed
// once; when it does not parse the router gets an empty message instead and
// the call is marked, so the call interceptor answers invalid_argument in
// whichever protocol the client speaks. A request stream (client-streaming
// and bidi methods) is never collected: its envelopes go to the handler as
// they arrive, each checked on the way, and one that does not parse ends the
// call with invalid_argument. (Waiting for the end of the request stream
// would leave a client that sends one message and waits for the answer, as
// every reflection client does, waiting for ever.)
// A unary call's message, once parsed here, is not parsed again: the router
// gets an empty message and the call interceptor hands the handlers the one
// parsed here (a create of 1,000 resources spent a fifth of its server time
// in the second parse).
// A unary Connect JSON body (the plain case goes to the unary lane, so these
// are the calls with a deadline, or compressed) is decoded here too, once,
// and reaches the router as `{}` like a binary one. One that does not decode
// carries connect's own message in its context (malformedBodyReason), so the
// call interceptor answers it invalid_argument with a request id and a log
// line, as the lane does, where connect would decode it before any
// interceptor and answer without either. So is one JSON message in an
// envelope (Connect streaming, gRPC and gRPC-Web with +json: a
// server-streaming call such as the explorer's Watch, or a unary one over
// gRPC): refused the same way, or passed on (a unary one parsed once, here).
// A compressed body (Connect unary) or message (enveloped) in a compression
// the server offers is decompressed here, once, within the body limit, and
// then checked as an uncompressed one; connect gets it uncompressed. Bytes
// that are not valid data of the compression are malformed input too (with
// why, in malformedBodyReason), where connect answered a gzip stream cut
// short with internal, as it did a compressed message that does not parse.
// A body over the limit once decompressed, and a compression the server
// does not offer, are left to connect (resource_exhausted, unimplemented).
import type { DescMethod, JsonReadOptions, Message } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createConnectRouter,
  createContextValues,
  type ConnectRouter,
  type ContextValues,
} from "@connectrpc/connect";
import { createMethodSerializationLookup, type Compression } from "@connectrpc/connect/protocol";
import { invalidArgument, resourceExhausted } from "../errors.js";
import { plannedFromBinary } from "../protobuf/index.js";
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { UniversalHandler, UniversalServerRequest } from "@connectrpc/connect/protocol";
import { malformedBodyReason, notAMessage, parsedBody, type BodyRefusal } from "./body-marks.js";
import { decodeJsonMessage, grpcEnvelope } from "./grpc-wire.js";
import { decompress } from "../http/read-body.js";
import type { Arrival, Resolution } from "../http/arrival.js";
import type { Pipeline } from "./pipeline.js";
import { resetTransport, transportReset } from "./transport-reset.js";
import type { FeedLane } from "./feed-lane.js";
import type { UnaryLane } from "./unary-lane.js";

const UNARY_BINARY = /^application\/proto\b/i;
const ENVELOPED_BINARY = /^application\/(connect\+proto|grpc(-web)?(\+proto)?)\s*(;|$)/i;
const UNARY_JSON = /^application\/json\s*(;|$)/i;
const ENVELOPED_JSON = /^application\/(connect|grpc|grpc-web)\+json\s*(;|$)/i;
const EMPTY_JSON = new TextEncoder().encode("{}");
const EMPTY_JSON_ENVELOPE = new Uint8Array([0, 0, 0, 0, EMPTY_JSON.length, ...EMPTY_JSON]);

const CONNECT_STREAM = /^application\/connect\+/i;

/** The header that names the compression of a request's body (Connect unary) or of its messages (enveloped). */
function encodingHeader(type: string, connectUnary: boolean): string {
  return connectUnary ? "content-encoding" : CONNECT_STREAM.test(type) ? "connect-content-encoding" : "grpc-encoding";
}

/** The compression a request names: null for none (or identity), undefined for one the server does not offer (connect answers it). */
function requestCompression(
  header: Headers,
  name: string,
  offered: readonly Compression[],
): Compression | null | undefined {
  const v = header.get(name)?.trim().toLowerCase();
  if (v === undefined || v === "" || v === "identity") return null;
  return offered.find((c) => c.name === v);
}

/** The message, or undefined when the bytes do not parse. */
function parse(method: DescMethod, bytes: Uint8Array): Message | undefined {
  try {
    return plannedFromBinary(method.input, bytes);
  } catch {
    return undefined;
  }
}

function parses(method: DescMethod, bytes: Uint8Array): boolean {
  return parse(method, bytes) !== undefined;
}

/** The message bytes of a body that is exactly one envelope with these flags (0: uncompressed, 1: compressed); null when it is not such a body. */
function onlyEnvelope(body: Uint8Array, flags: 0 | 1): Uint8Array | null {
  if (body.length < 5 || body[0] !== flags) return null;
  const len = new DataView(body.buffer, body.byteOffset + 1, 4).getUint32(0);
  return 5 + len === body.length ? body.subarray(5) : null;
}

/** The one message of a body that is exactly one uncompressed envelope, parsed; null when it is not such a body. */
function singleEnvelope(method: DescMethod, body: Uint8Array): Message | undefined | null {
  const bytes = onlyEnvelope(body, 0);
  return bytes === null ? null : parse(method, bytes);
}

/**
 * The request with `empty` (an empty message) for its body, and the context
 * values that carry what the guard learned of the real one. An empty message
 * parses; the call interceptor puts the parsed message in its place, or
 * refuses the call.
 */
function emptied(req: UniversalServerRequest, empty: Uint8Array, contextValues: ContextValues): UniversalServerRequest {
  return { ...withBody(req, empty), contextValues };
}

/** The request with `body` in place of its own, uncompressed (a Connect unary body's content-encoding is dropped; an uncompressed envelope is valid under any grpc-encoding). */
function withBody(req: UniversalServerRequest, body: Uint8Array): UniversalServerRequest {
  const header = new Headers(req.header);
  header.delete("content-encoding");
  if (header.has("content-length")) header.set("content-length", String(body.length));
  return { ...req, header, body: replay([body]) };
}

/** A request emptied (`empty`: an empty message in its format), the parsed message in its context values. */
function parsedInstead(req: UniversalServerRequest, empty: Uint8Array, message: Message): UniversalServerRequest {
  return emptied(req, empty, (req.contextValues ?? createContextValues()).set(parsedBody, message));
}

/** A request emptied, and why its body is refused in its context values. */
function refusedInstead(req: UniversalServerRequest, empty: Uint8Array, refusal: BodyRefusal): UniversalServerRequest {
  return emptied(req, empty, (req.contextValues ?? createContextValues()).set(malformedBodyReason, refusal));
}

/** Whether every complete, uncompressed envelope holds a message that parses (framing errors are left to connect). */
function envelopesParse(method: DescMethod, body: Uint8Array): boolean {
  let at = 0;
  while (at + 5 <= body.length) {
    const flags = body[at] as number;
    const len = new DataView(body.buffer, body.byteOffset + at + 1, 4).getUint32(0);
    if (at + 5 + len > body.length) return true;
    // Compressed or end-of-stream envelopes are not messages of ours.
    if (flags === 0 && !parses(method, body.subarray(at + 5, at + 5 + len))) return false;
    at += 5 + len;
  }
  return true;
}

async function* replay(chunks: Uint8Array[], rest?: AsyncIterator<Uint8Array>): AsyncIterable<Uint8Array> {
  yield* chunks;
  if (rest === undefined) return;
  for (;;) {
    const r = await rest.next();
    if (r.done === true) return;
    yield r.value;
  }
}

/**
 * The request stream's bytes as they arrive, each complete message checked
 * before it is passed on; a compressed one (with `compression`, the one the
 * request names) is decompressed here and passed on uncompressed. Framing
 * errors, messages over the limit and compressed messages of a compression
 * the server does not offer are left to connect.
 */
async function* checkedEnvelopes(
  method: DescMethod,
  body: AsyncIterable<Uint8Array>,
  maxBytes: number,
  compression: { readonly use: Compression; readonly header: string } | null,
): AsyncIterable<Uint8Array> {
  let pending: Uint8Array = new Uint8Array(0);
  const it = body[Symbol.asyncIterator]();
  for (;;) {
    const r = await it.next();
    if (r.done === true) break;
    pending = pending.length === 0 ? r.value : Buffer.concat([pending, r.value]);
    let at = 0;
    let passed = 0;
    while (at + 5 <= pending.length) {
      const flags = pending[at] as number;
      const len = new DataView(pending.buffer, pending.byteOffset + at + 1, 4).getUint32(0);
      if (len > maxBytes) {
        // Connect refuses it (resource_exhausted) without reading it all.
        yield pending.subarray(passed);
        yield* replay([], it);
        return;
      }
      if (at + 5 + len > pending.length) break;
      let message = pending.subarray(at + 5, at + 5 + len);
      const compressed = flags === 1 && compression !== null;
      if (compressed) {
        const plain = await decompress(compression.use, message, maxBytes, "a request message", compression.header);
        if ("malformed" in plain) throw invalidArgument(plain.malformed, "MALFORMED_BODY");
        if ("tooLarge" in plain)
          throw resourceExhausted(
            `a request message is larger than ${maxBytes} bytes after decompression`,
            "BODY_TOO_LARGE",
          );
        message = plain.bytes;
      }
      if ((flags === 0 || compressed) && !parses(method, message)) {
        throw invalidArgument(`a request message is not a valid ${method.input.typeName} message`, "MALFORMED_BODY");
      }
      if (compressed) {
        // Passed on uncompressed: connect does not decompress it again.
        if (at > passed) yield pending.subarray(passed, at);
        yield await grpcEnvelope(message, null);
        passed = at + 5 + len;
      }
      at += 5 + len;
    }
    if (at > passed) yield pending.subarray(passed, at);
    pending = pending.subarray(at);
  }
  if (pending.length > 0) yield pending;
}

export function guardBinaryBodies(
  handler: UniversalHandler,
  maxBytes: number,
  jsonOptions?: Partial<JsonReadOptions>,
  offered: readonly Compression[] = [],
): UniversalHandler {
  const method = handler.method;
  const requestStream = method.methodKind === "client_streaming" || method.methodKind === "bidi_streaming";
  // connect's own JSON decoding of the request, with the router's options.
  const jsonInput = requestStream
    ? undefined
    : createMethodSerializationLookup(method, undefined, jsonOptions, {
        readMaxBytes: maxBytes,
        writeMaxBytes: maxBytes,
      }).getI(false);
  const guarded = async (req: UniversalServerRequest) => {
    const type = req.header.get("content-type") ?? "";
    const unary = UNARY_BINARY.test(type);
    // Connect unary JSON; and one JSON message in an envelope (Connect streaming, gRPC, gRPC-Web: a server-streaming call, or a unary one over gRPC).
    const json = jsonInput !== undefined && method.methodKind === "unary" && UNARY_JSON.test(type);
    const envelopedJson = jsonInput !== undefined && ENVELOPED_JSON.test(type);
    if (
      (!unary && !json && !envelopedJson && !ENVELOPED_BINARY.test(type)) ||
      !(typeof req.body === "object" && req.body !== null && Symbol.asyncIterator in req.body)
    ) {
      return handler(req);
    }
    // An empty message in the request's own format, for the router when the guard has decoded (or refused) the real one.
    const empty = json
      ? EMPTY_JSON
      : envelopedJson
        ? EMPTY_JSON_ENVELOPE
        : unary
          ? new Uint8Array(0)
          : new Uint8Array(5);
    const header = encodingHeader(type, unary || json);
    const compression = requestCompression(req.header, header, offered);
    // A compression the server does not offer: connect answers unimplemented.
    if (compression === undefined) return handler(req);
    if (requestStream)
      return handler({
        ...req,
        body: checkedEnvelopes(method, req.body, maxBytes, compression === null ? null : { use: compression, header }),
      });
    const it = req.body[Symbol.asyncIterator]();
    const chunks: Uint8Array[] = [];
    let size = 0;
    for (;;) {
      const r = await it.next();
      if (r.done === true) break;
      chunks.push(r.value);
      size += r.value.byteLength;
      // Over the limit: let connect answer resource_exhausted as usual.
      if (size > maxBytes + 5) return handler({ ...req, body: replay(chunks, it) });
    }
    let body: Uint8Array = Buffer.concat(chunks, size);
    if (compression !== null) {
      // Decompressed once, here; what follows sees an uncompressed body, as connect would after its own decompression.
      const whole = unary || json;
      const one = whole ? null : onlyEnvelope(body, 1);
      if (whole || one !== null) {
        const plain = await decompress(
          compression,
          one ?? body,
          maxBytes,
          whole ? "the request body" : "the request message",
          header,
        );
        if ("tooLarge" in plain) return handler({ ...req, body: replay([body]) });
        if ("malformed" in plain)
          return handler(refusedInstead(req, empty, { message: plain.malformed, reason: "MALFORMED_BODY" }));
        body = whole ? plain.bytes : await grpcEnvelope(plain.bytes, null);
        req = withBody(req, body);
      }
    }
    if (json || envelopedJson) {
      // Framing errors (not exactly one uncompressed envelope) are connect's to answer.
      const bytes = json ? body : onlyEnvelope(body, 0);
      if (bytes === null) return handler({ ...req, body: replay([body]) });
      const contextValues = req.contextValues ?? createContextValues();
      let message: Message | undefined;
      try {
        message = decodeJsonMessage(jsonInput, bytes, contextValues);
      } catch {
        // Not a decoding failure: connect answers it as usual.
        return handler({ ...req, body: replay([body]) });
      }
      // Marked malformed; or parsed once, here, as a binary body is (a server-streaming call's request is
      // checked here and decoded by connect, as a binary one is).
      if (message === undefined) return handler(emptied(req, empty, contextValues));
      if (method.methodKind !== "unary") return handler({ ...req, body: replay([body]) });
      return handler(parsedInstead(req, empty, message));
    }
    if (method.methodKind === "unary") {
      const one = unary ? parse(method, body) : singleEnvelope(method, body);
      if (one !== null)
        return handler(
          one === undefined
            ? refusedInstead(req, empty, notAMessage(method.input.typeName))
            : parsedInstead(req, empty, one),
        );
    }
    const ok = unary ? parses(method, body) : envelopesParse(method, body);
    if (ok) return handler({ ...req, body: replay([body]) });
    return handler(refusedInstead(req, empty, notAMessage(method.input.typeName)));
  };
  return Object.assign(guarded, {
    service: handler.service,
    method: handler.method,
    requestPath: handler.requestPath,
    protocolNames: handler.protocolNames,
    allowedMethods: handler.allowedMethods,
    supportedContentType: handler.supportedContentType,
  });
}

type ArrivedHandler = (
  req: IncomingMessage | Http2ServerRequest,
  res: ServerResponse | Http2ServerResponse,
  arrival: Arrival,
) => void;

export interface GuardedAdapterOptions {
  readonly routes: (router: ConnectRouter) => void;
  /** Interceptors, body limit, compressions and JSON options of every call (pipeline.ts). */
  readonly pipeline: Pipeline;
  /** Serves the plain unary cases (unary-lane.ts); the rest go through connect. */
  readonly lane?: UnaryLane;
  /** Serves the plain gRPC Watch (feed-lane.ts); the rest go through connect. */
  readonly feedLane?: FeedLane;
  /** Requests for paths no service answers. */
  readonly fallback?: ArrivedHandler;
}

/** An RPC path's resolution (src/http/arrival.ts): its method, and the guarded handler that serves it. */
class RpcResolution implements Resolution {
  readonly rpcPath = true;
  constructor(
    readonly method: DescMethod,
    readonly handler: UniversalHandler,
  ) {}
}

/** The adapter: serves a request, and resolves a raw path to its method (for the front door, which does it once). */
export interface RpcAdapter extends ArrivedHandler {
  /** The method an RPC path (/package.Service/Method, as sent, without the query) names, if any service has it. */
  resolve(rawPath: string): Resolution | undefined;
}

/**
 * connect-node's connectNodeAdapter, with every handler behind the guard.
 * (The adapter itself offers no hook between body and parse.) Each call's
 * context is its arrival's (src/http/arrival.ts), with `resetTransport` for
 * its own stream or connection.
 */
export function guardedNodeAdapter(options: GuardedAdapterOptions): RpcAdapter {
  const router = createConnectRouter(options.pipeline.routerOptions);
  options.routes(router);
  const paths = new Map<string, RpcResolution>();
  for (const h of router.handlers)
    paths.set(
      h.requestPath,
      new RpcResolution(
        h.method,
        guardBinaryBodies(
          h,
          options.pipeline.readMaxBytes,
          options.pipeline.jsonOptions,
          options.pipeline.acceptCompression,
        ),
      ),
    );
  const serve = (
    req: IncomingMessage | Http2ServerRequest,
    res: ServerResponse | Http2ServerResponse,
    arrival: Arrival,
  ): void => {
    // The front door's resolution when it made one (every request it passes on), else the path's own.
    const door = arrival.resolution;
    const resolved =
      door === undefined
        ? paths.get(req.url?.split("?", 2)[0] ?? "")
        : door instanceof RpcResolution
          ? door
          : undefined;
    if (resolved === undefined) {
      options.fallback?.(req, res, arrival);
      return;
    }
    const { handler, method } = resolved;
    const values = arrival.values.set(resetTransport, transportReset(res));
    // The plain Connect unary case runs without connect's universal request and response.
    if (options.lane?.serveConnect(req, res, values, method) === true) return;
    // So does the plain gRPC Watch, each message framed once for all its streams.
    if (options.feedLane?.serveGrpc(req, res, values, method) === true) return;
    const uReq = universalRequestFromNodeRequest(req, res, undefined, values);
    handler(uReq)
      .then((uRes) => universalResponseToNodeResponse(uRes, res))
      .catch((reason: unknown) => {
        // A client that went away aborts the write; anything else has no one left to tell.
        if (ConnectError.from(reason).code !== Code.Aborted && !res.headersSent) {
          res.writeHead(500);
          res.end();
        }
      });
  };
  return Object.assign(serve, { resolve: (rawPath: string) => paths.get(rawPath) });
}
