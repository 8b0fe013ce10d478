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
// A unary Connect JSON body (uncompressed; the plain case goes to the unary
// lane, so these are the calls with a deadline) is decoded here too, once,
// and reaches the router as `{}` like a binary one. One that does not decode
// carries connect's own message in its context (malformedJsonBody), so the
// call interceptor answers it invalid_argument with a request id and a log
// line, as the lane does, where connect would decode it before any
// interceptor and answer without either.
import type { DescMethod, JsonReadOptions, Message } from "@bufbuild/protobuf";
import { Code, ConnectError, createConnectRouter, createContextValues, type ConnectRouter, type ContextValues } from "@connectrpc/connect";
import { createMethodSerializationLookup } from "@connectrpc/connect/protocol";
import { invalidArgument } from "../errors.js";
import { plannedFromBinary } from "../protobuf/index.js";
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { UniversalHandler, UniversalServerRequest } from "@connectrpc/connect/protocol";
import { malformedBinaryBody, parsedBody } from "./body-marks.js";
import { decodeJsonMessage } from "./grpc-wire.js";
import type { Pipeline } from "./pipeline.js";
import { resetTransport, transportReset } from "./transport-reset.js";
import type { FeedLane } from "./feed-lane.js";
import type { UnaryLane } from "./unary-lane.js";

const UNARY_BINARY = /^application\/proto\b/i;
const ENVELOPED_BINARY = /^application\/(connect\+proto|grpc(-web)?(\+proto)?)\s*(;|$)/i;
const UNARY_JSON = /^application\/json\s*(;|$)/i;
const EMPTY_JSON = new TextEncoder().encode("{}");

function isCompressed(header: Headers): boolean {
  for (const name of ["content-encoding", "connect-content-encoding", "grpc-encoding"]) {
    const v = header.get(name);
    if (v !== null && v.toLowerCase() !== "identity") return true;
  }
  return false;
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

/** The one message of a body that is exactly one uncompressed envelope, parsed; null when it is not such a body. */
function singleEnvelope(method: DescMethod, body: Uint8Array): Message | undefined | null {
  if (body.length < 5 || body[0] !== 0) return null;
  const len = new DataView(body.buffer, body.byteOffset + 1, 4).getUint32(0);
  if (5 + len !== body.length) return null;
  return parse(method, body.subarray(5));
}

/**
 * The request with `empty` (an empty message) for its body, and the context
 * values that carry what the guard learned of the real one. An empty message
 * parses; the call interceptor puts the parsed message in its place, or
 * refuses the call.
 */
function emptied(req: UniversalServerRequest, empty: Uint8Array, contextValues: ContextValues): UniversalServerRequest {
  const header = new Headers(req.header);
  if (header.has("content-length")) header.set("content-length", String(empty.length));
  return { ...req, header, body: replay([empty]), contextValues };
}

/** A binary request emptied, the parsed message (or the malformed mark) in its context values. */
function substituted(req: UniversalServerRequest, unary: boolean, key: "parsed" | "malformed", message?: Message): UniversalServerRequest {
  const contextValues = req.contextValues ?? createContextValues();
  if (key === "parsed") contextValues.set(parsedBody, message);
  else contextValues.set(malformedBinaryBody, true);
  return emptied(req, unary ? new Uint8Array(0) : new Uint8Array(5), contextValues);
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
 * The request stream's bytes as they arrive, each complete uncompressed
 * message checked before it is passed on. Framing errors, compressed
 * envelopes and messages over the limit are left to connect.
 */
async function* checkedEnvelopes(method: DescMethod, body: AsyncIterable<Uint8Array>, maxBytes: number): AsyncIterable<Uint8Array> {
  let pending: Uint8Array = new Uint8Array(0);
  const it = body[Symbol.asyncIterator]();
  for (;;) {
    const r = await it.next();
    if (r.done === true) break;
    pending = pending.length === 0 ? r.value : Buffer.concat([pending, r.value]);
    let at = 0;
    while (at + 5 <= pending.length) {
      const flags = pending[at] as number;
      const len = new DataView(pending.buffer, pending.byteOffset + at + 1, 4).getUint32(0);
      if (len > maxBytes) {
        // Connect refuses it (resource_exhausted) without reading it all.
        yield pending;
        yield* replay([], it);
        return;
      }
      if (at + 5 + len > pending.length) break;
      if (flags === 0 && !parses(method, pending.subarray(at + 5, at + 5 + len))) {
        throw invalidArgument(`a request message is not a valid ${method.input.typeName} message`, "MALFORMED_BODY");
      }
      at += 5 + len;
    }
    if (at > 0) yield pending.subarray(0, at);
    pending = pending.subarray(at);
  }
  if (pending.length > 0) yield pending;
}

export function guardBinaryBodies(handler: UniversalHandler, maxBytes: number, jsonOptions?: Partial<JsonReadOptions>): UniversalHandler {
  const method = handler.method;
  const requestStream = method.methodKind === "client_streaming" || method.methodKind === "bidi_streaming";
  // connect's own JSON decoding of the request, with the router's options.
  const jsonInput = method.methodKind === "unary" ? createMethodSerializationLookup(method, undefined, jsonOptions, { readMaxBytes: maxBytes, writeMaxBytes: maxBytes }).getI(false) : undefined;
  const guarded = async (req: UniversalServerRequest) => {
    const type = req.header.get("content-type") ?? "";
    const unary = UNARY_BINARY.test(type);
    const json = jsonInput !== undefined && UNARY_JSON.test(type);
    if ((!unary && !json && !ENVELOPED_BINARY.test(type)) || isCompressed(req.header) || !(typeof req.body === "object" && req.body !== null && Symbol.asyncIterator in req.body)) {
      return handler(req);
    }
    if (requestStream) return handler({ ...req, body: checkedEnvelopes(method, req.body, maxBytes) });
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
    const body = Buffer.concat(chunks, size);
    if (json) {
      const contextValues = req.contextValues ?? createContextValues();
      let message: Message | undefined;
      try {
        message = decodeJsonMessage(jsonInput, body, contextValues);
      } catch {
        // Not a decoding failure: connect answers it as usual.
        return handler({ ...req, body: replay([body]) });
      }
      // Parsed once, here, as a binary body is; or marked malformed.
      if (message !== undefined) contextValues.set(parsedBody, message);
      return handler(emptied(req, EMPTY_JSON, contextValues));
    }
    if (method.methodKind === "unary") {
      const one = unary ? parse(method, body) : singleEnvelope(method, body);
      if (one !== null) return handler(substituted(req, unary, one === undefined ? "malformed" : "parsed", one));
    }
    const ok = unary ? parses(method, body) : envelopesParse(method, body);
    if (ok) return handler({ ...req, body: replay([body]) });
    return handler(substituted(req, unary, "malformed"));
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

type NodeHandler = (req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse) => void;

export interface GuardedAdapterOptions {
  readonly routes: (router: ConnectRouter) => void;
  /** Interceptors, body limit, compressions and JSON options of every call (pipeline.ts). */
  readonly pipeline: Pipeline;
  /** Serves the plain unary cases (unary-lane.ts); the rest go through connect. */
  readonly lane?: UnaryLane;
  /** Serves the plain gRPC Watch (feed-lane.ts); the rest go through connect. */
  readonly feedLane?: FeedLane;
  /** Requests for paths no service answers. */
  readonly fallback?: NodeHandler;
  readonly contextValues?: (req: IncomingMessage | Http2ServerRequest) => ContextValues;
}

/**
 * connect-node's connectNodeAdapter, with every handler behind the guard.
 * (The adapter itself offers no hook between body and parse.) Each call's
 * context carries `resetTransport` for its own stream or connection.
 */
export function guardedNodeAdapter(options: GuardedAdapterOptions): NodeHandler {
  const router = createConnectRouter(options.pipeline.routerOptions);
  options.routes(router);
  const paths = new Map<string, UniversalHandler>();
  for (const h of router.handlers) paths.set(h.requestPath, guardBinaryBodies(h, options.pipeline.readMaxBytes, options.pipeline.jsonOptions));
  return (req, res) => {
    const handler = paths.get(req.url?.split("?", 2)[0] ?? "");
    if (handler === undefined) {
      options.fallback?.(req, res);
      return;
    }
    const values = options.contextValues?.(req) ?? createContextValues();
    values.set(resetTransport, transportReset(res));
    // The plain Connect unary case runs without connect's universal request and response.
    if (options.lane?.serveConnect(req, res, values) === true) return;
    // So does the plain gRPC Watch, each message framed once for all its streams.
    if (options.feedLane?.serveGrpc(req, res, values) === true) return;
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
}
