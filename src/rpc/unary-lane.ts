// The unary lane: a unary call of one of our services runs its interceptors
// and its handler without connect's universal request and response (an async
// iterable over the body, a linked AbortController and a DOMException on
// every call, the handler context copied three times). Under 50 concurrent
// Connect reads those cost more CPU than the read itself (docs/benchmarks/load.md,
// "Throughput under load").
//
// Three callers use it:
// - the REST gateway, for every operation, its streams too (`stream`): the
//   call runs in process with the request's arrival (src/http/arrival.ts)
//   for its context values;
// - the process's own calls (lane-transport.ts: the DICOM receiver's);
// - the Connect adapter (binary-guard.ts), for the plain cases of two
//   protocols: Connect unary (POST, an uncompressed JSON or protobuf body of
//   a declared length within the limit) and gRPC unary over HTTP/2 (one
//   uncompressed protobuf message), both without a deadline header. The
//   answer is compressed as connect would (ACCEPT_COMPRESSION, from
//   COMPRESS_MIN_BYTES). Anything else (GET, compressed requests, deadlines,
//   chunked Connect bodies, gRPC-Web, streams) still goes through connect,
//   which owns those rules.
// The interceptors, the body limit, the compressions and the JSON options
// are the pipeline's (pipeline.ts), the very ones connect's router gets:
// they run exactly as they run inside connect, with the same request and
// response shapes. What stays here is only what connect would do on the
// wire: reading the body, parsing, writing the answer in the protocol.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import {
  create,
  type DescMessage,
  type DescMethod,
  type DescMethodServerStreaming,
  type DescMethodUnary,
  type DescService,
  isMessage,
  type Message,
} from "@bufbuild/protobuf";
import { createContextValues } from "@connectrpc/connect";
import type {
  ContextValues,
  HandlerContext,
  Interceptor,
  MethodImplSpec,
  UnaryRequest,
  UnaryResponse,
} from "@connectrpc/connect";
import {
  createAsyncIterable,
  createMethodSerializationLookup,
  transformInvokeImplementation,
  type Compression,
  type MethodSerializationLookup,
} from "@connectrpc/connect/protocol";
import { codeToHttpStatus, errorToJsonBytes, trailerMux } from "@connectrpc/connect/protocol-connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { canceled, unimplemented } from "../errors.js";
import { abortOnCloseLazily } from "../http/abort-on-close.js";
import { webHeaders } from "../http/headers.js";
import { readBody } from "../http/read-body.js";
import {
  answerCompression,
  asConnectError,
  COMPRESS_MIN_BYTES,
  decodeJsonMessage,
  GRPC_PROTO_TYPE,
  grpcEnvelope,
  implementedMethods,
  isIdentity,
  nodeHeaders,
  parseBinaryMessage,
  plainGrpcCompression,
  readGrpcMessage,
} from "./grpc-wire.js";
import type { Pipeline } from "./pipeline.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

export interface UnaryCall<M = DescMethodUnary> {
  readonly method: M;
  readonly message: Message;
  /** The request headers the interceptors and the handler see. */
  readonly header: Headers;
  /**
   * Aborted when the client goes away; or a function that makes that signal
   * when the call first asks for it (abortOnCloseLazily): a unary call's
   * interceptors and handler then build none unless they read it.
   */
  readonly signal: AbortSignal | (() => AbortSignal);
  readonly protocolName: string;
  readonly requestMethod: string;
  readonly url: string;
  readonly contextValues?: ContextValues;
}

interface UnaryOutcome {
  readonly message: Message;
  readonly header: Headers;
  readonly trailer: Headers;
}

export interface UnaryLane {
  /** Runs the interceptors and the handler; rejects with what the interceptors made of a failure. */
  call(call: UnaryCall): Promise<UnaryOutcome>;
  /**
   * A server-streaming call in process (REST's streams: the parquet export,
   * the event stream): the interceptors and the handler run as for a call
   * from the wire, with the call's own context values. Resolves once the
   * first message is ready (or the stream ended), with the response headers
   * and the messages; rejects with what the interceptors made of a failure
   * before then. A failure later ends the iterable with it. The trailer is
   * the call's own: filled by the handler and the interceptors as the stream
   * ends, so it is complete once the messages have ended.
   */
  stream(
    call: UnaryCall<DescMethodServerStreaming>,
  ): Promise<{ readonly header: Headers; readonly trailer: Headers; readonly message: AsyncIterable<Message> }>;
  /**
   * Answers a Connect unary request when it is the plain case (see the top of
   * this file) and returns true; returns false, having touched nothing, when
   * connect must answer it. `method`: what the request's path names, as the
   * front door resolved it (src/http/arrival.ts).
   */
  serveConnect(req: Req, res: Res, contextValues: ContextValues, method: DescMethod): boolean;
}

export interface UnaryLaneOptions {
  readonly services: readonly DescService[];
  /** Handler objects keyed by service type name; a missing method is left to connect (unimplemented). */
  readonly impls: ReadonlyMap<string, object>;
  /**
   * The interceptors and limits of every call. readMaxBytes (MAX_BODY_BYTES):
   * a Connect body declared larger is left to connect, which refuses it; a
   * larger gRPC message is refused by readBody (BODY_TOO_LARGE).
   */
  readonly pipeline: Pipeline;
}

const JSON_TYPE = /^application\/json(?:;\s*charset=utf-?8)?$/i;
const PROTO_TYPE = /^application\/proto$/i;

/** The handler context of a call run in the lane (no deadline: those calls go through connect); its signal made when read. */
function contextOf(
  call: UnaryCall<DescMethodUnary | DescMethodServerStreaming>,
  responseHeader?: Headers,
): HandlerContext {
  const made = call.signal;
  let signal = typeof made === "function" ? undefined : made;
  return {
    method: call.method,
    service: call.method.parent,
    requestMethod: call.requestMethod,
    protocolName: call.protocolName,
    url: call.url,
    get signal() {
      return (signal ??= (made as () => AbortSignal)());
    },
    timeoutMs: () => undefined,
    requestHeader: call.header,
    responseHeader: new Headers(responseHeader),
    responseTrailer: new Headers(),
    values: call.contextValues ?? createContextValues(),
  };
}

type UnaryFn = (req: UnaryRequest) => Promise<UnaryResponse>;
type AnyFn = Parameters<Interceptor>[0];

/** Puts what the interceptors answered with into the call's own headers (as connect's invoker does). */
function copyHeaders(from: Headers, to: Headers): void {
  if (from === to) return;
  for (const key of [...to.keys()]) to.delete(key);
  from.forEach((value, key) => to.set(key, value));
}

/**
 * A unary call through the interceptors to its handler, as connect's
 * invokeUnaryImplementation runs it (the same request and response shapes,
 * the same interceptor order), except that the signal is read from the
 * context only when an interceptor or the handler asks for it: neither is
 * given a copy of the context that would read it.
 */
async function invokeUnary(
  spec: MethodImplSpec & { kind: "unary" },
  context: HandlerContext,
  input: Message,
  interceptors: readonly Interceptor[],
): Promise<Message> {
  const { method } = spec;
  const handle: UnaryFn = async (req) => {
    const ctx: HandlerContext = {
      method,
      service: req.service,
      requestMethod: context.requestMethod,
      protocolName: context.protocolName,
      url: context.url,
      get signal() {
        return req.signal;
      },
      timeoutMs: context.timeoutMs,
      requestHeader: req.header,
      responseHeader: context.responseHeader,
      responseTrailer: context.responseTrailer,
      values: req.contextValues,
    };
    const out = (await spec.impl(req.message, ctx)) as Message;
    return {
      stream: false,
      message: isMessage(out, method.output) ? out : create(method.output, out),
      method,
      service: method.parent,
      header: context.responseHeader,
      trailer: context.responseTrailer,
    };
  };
  let next = handle;
  for (let i = interceptors.length - 1; i >= 0; i--) next = interceptors[i]!(next as AnyFn) as UnaryFn;
  const res = await next({
    stream: false,
    message: input,
    method,
    requestMethod: context.requestMethod,
    url: context.url,
    get signal() {
      return context.signal;
    },
    header: context.requestHeader,
    service: method.parent,
    contextValues: context.values,
  });
  copyHeaders(res.header, context.responseHeader);
  copyHeaders(res.trailer, context.responseTrailer);
  return res.message;
}

export function createUnaryLane(opts: UnaryLaneOptions): UnaryLane {
  const { readMaxBytes, jsonOptions, acceptCompression } = opts.pipeline;
  // connect's invoker takes a mutable list: a copy, made once.
  const interceptors = [...opts.pipeline.interceptors];
  interface Entry {
    readonly spec: MethodImplSpec & { kind: "unary" };
    readonly serialization: MethodSerializationLookup<DescMessage, DescMessage>;
  }
  const byMethod = new Map<DescMethod, Entry>();
  for (const spec of implementedMethods(opts.services, opts.impls, "unary").values()) {
    byMethod.set(spec.method, {
      spec,
      serialization: createMethodSerializationLookup(spec.method, undefined, jsonOptions, {
        readMaxBytes,
        writeMaxBytes: 0xffffffff,
      }),
    });
  }
  const streams = new Map<DescMethodServerStreaming, MethodImplSpec & { kind: "server_streaming" }>();
  for (const spec of implementedMethods(opts.services, opts.impls, "server_streaming").values())
    streams.set(spec.method, spec);

  /**
   * A binary request message, or, when the bytes are not one (undefined),
   * an empty one with the call marked malformed: the call interceptor then
   * answers invalid_argument with a request id and a log line, as the binary
   * guard has it answered on every other wire (never connect's `internal`).
   */
  function parseBinary(entry: Entry, bytes: Uint8Array | undefined, contextValues: ContextValues): Message {
    // By its plan (a create of 1,000 spent four fifths of its server CPU in connect's fromBinary).
    return parseBinaryMessage(entry.spec.method.input, bytes, readMaxBytes, contextValues);
  }

  /** A JSON request message, or an empty one with the call marked (decodeJsonMessage). */
  function parseJson(entry: Entry, bytes: Uint8Array, contextValues: ContextValues): Message {
    return decodeJsonMessage(entry.serialization.getI(false), bytes, contextValues) ?? create(entry.spec.method.input);
  }

  async function run(
    entry: Entry,
    call: UnaryCall,
    responseHeader?: Headers,
  ): Promise<{ message: Message; context: HandlerContext }> {
    const context = contextOf(call, responseHeader);
    const message = await invokeUnary(entry.spec, context, call.message, interceptors);
    return { message, context };
  }

  /** Runs a call that came over the wire (Connect or gRPC): its headers, its URL, aborted when the client goes away. */
  function runFromWire(
    entry: Entry,
    req: Req,
    res: Res,
    message: Message,
    protocolName: string,
    contextValues: ContextValues,
    responseHeader: Headers,
  ) {
    const authority = String(req.headers[":authority"] ?? req.headers.host ?? "localhost");
    const call: UnaryCall = {
      method: entry.spec.method,
      message,
      header: webHeaders(req),
      signal: abortOnCloseLazily(res, () => canceled("the client went away")),
      protocolName,
      requestMethod: "POST",
      url: `http://${authority}${req.url ?? "/"}`,
      contextValues,
    };
    return run(entry, call, responseHeader);
  }

  async function answerConnect(
    entry: Entry,
    req: Req,
    res: Res,
    binary: boolean,
    contextValues: ContextValues,
    compression: Compression | null,
  ): Promise<void> {
    const responseHeader = new Headers({ "content-type": binary ? "application/proto" : "application/json" });
    let context: HandlerContext | undefined;
    let status = 200;
    let body: Uint8Array;
    try {
      // Its declared length is within the limit (serveConnect), so this reads it whole.
      const bytes = await readBody(req, readMaxBytes);
      const message = binary ? parseBinary(entry, bytes, contextValues) : parseJson(entry, bytes, contextValues);
      const out = await runFromWire(entry, req, res, message, "connect", contextValues, responseHeader);
      context = out.context;
      body = entry.serialization.getO(binary).serialize(out.message);
    } catch (e) {
      const error = asConnectError(e);
      status = codeToHttpStatus(error.code);
      const header = context?.responseHeader ?? responseHeader;
      header.set("content-type", "application/json");
      error.metadata.forEach((value, key) => header.set(key, value));
      body = errorToJsonBytes(error, jsonOptions);
    }
    if (compression !== null && body.byteLength >= COMPRESS_MIN_BYTES) {
      body = await compression.compress(body);
      (context?.responseHeader ?? responseHeader).set("content-encoding", compression.name);
    }
    const header = trailerMux(context?.responseHeader ?? responseHeader, context?.responseTrailer ?? new Headers());
    header.set("content-length", String(body.byteLength));
    if (res.destroyed) return;
    (res as ServerResponse).writeHead(status, nodeHeaders(header));
    res.end(body);
  }

  async function answerGrpc(
    entry: Entry,
    req: Req,
    res: Res,
    contextValues: ContextValues,
    compression: Compression | null,
  ): Promise<void> {
    const responseHeader = new Headers({ "content-type": "application/grpc+proto" });
    if (compression !== null) responseHeader.set("grpc-encoding", compression.name);
    let context: HandlerContext | undefined;
    let envelope: Buffer | undefined;
    const trailer = new Headers();
    try {
      // Exactly one uncompressed message (a unary call).
      const message = parseBinary(entry, await readGrpcMessage(req, readMaxBytes), contextValues);
      const out = await runFromWire(entry, req, res, message, "grpc", contextValues, responseHeader);
      context = out.context;
      envelope = await grpcEnvelope(entry.serialization.getO(true).serialize(out.message), compression);
      context.responseTrailer.forEach((value, key) => trailer.append(key, value));
      setTrailerStatus(trailer, undefined);
    } catch (e) {
      envelope = undefined;
      setTrailerStatus(trailer, asConnectError(e));
    }
    if (res.destroyed) return;
    const r = res as Http2ServerResponse;
    r.writeHead(200, nodeHeaders(context?.responseHeader ?? responseHeader));
    r.addTrailers(nodeHeaders(trailer));
    if (envelope === undefined) r.end();
    else r.end(envelope);
  }

  return {
    async call(call) {
      const entry = byMethod.get(call.method);
      if (entry === undefined)
        throw unimplemented(`${call.method.parent.typeName}.${call.method.name} is not implemented`);
      const { message, context } = await run(entry, call);
      return { message, header: context.responseHeader, trailer: context.responseTrailer };
    },
    async stream(call) {
      const spec = streams.get(call.method);
      if (spec === undefined)
        throw unimplemented(`${call.method.parent.typeName}.${call.method.name} is not implemented`);
      const context = contextOf(call);
      const it = transformInvokeImplementation(
        spec,
        context,
        interceptors,
      )(createAsyncIterable([call.message]))[Symbol.asyncIterator]() as AsyncIterator<Message>;
      // The interceptors run and the handler starts here; a refusal rejects this call.
      const first = await it.next();
      async function* rest(): AsyncGenerator<Message> {
        try {
          if (first.done === true) return;
          yield first.value;
          for (let r = await it.next(); r.done !== true; r = await it.next()) yield r.value;
        } finally {
          // Left before the end (the client went away): end the handler's generators too.
          await it.return?.();
        }
      }
      return { header: context.responseHeader, trailer: context.responseTrailer, message: rest() };
    },
    serveConnect(req, res, contextValues, method) {
      if (req.method !== "POST") return false;
      const entry = byMethod.get(method);
      if (entry === undefined) return false;
      const h = req.headers;
      const type = h["content-type"] ?? "";
      if (GRPC_PROTO_TYPE.test(type)) {
        const compression = plainGrpcCompression(req, acceptCompression);
        if (compression === undefined) return false;
        answerGrpc(entry, req, res, contextValues, compression).catch(() => res.destroy());
        return true;
      }
      const binary = PROTO_TYPE.test(type);
      if (!binary && !JSON_TYPE.test(type)) return false;
      const length = Number(h["content-length"]);
      if (h["content-length"] === undefined || !Number.isInteger(length) || length < 0 || length > readMaxBytes)
        return false;
      if (h["connect-timeout-ms"] !== undefined || !isIdentity(h["content-encoding"])) return false;
      const compression = answerCompression(acceptCompression, h["accept-encoding"], "accept-encoding");
      if (compression === undefined) return false;
      answerConnect(entry, req, res, binary, contextValues, compression).catch(() => {
        if (!res.headersSent) {
          (res as ServerResponse).writeHead(500);
          res.end();
        } else res.destroy();
      });
      return true;
    },
  };
}
