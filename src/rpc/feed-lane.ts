// The feed lane: a gRPC Watch (EventService, both revisions) written to its
// HTTP/2 stream as one envelope per message, made once for every stream that
// sends the same message (docs/benchmarks/events.md, "Feed at 100 streams").
//
// The feed hands the same message object to every stream at the tail
// (store/events.ts) and the handler hands it on as bytes made once
// (event-service.ts preEncoded). Through connect each stream still
// serialized it again (toBinary copies the whole message into a new buffer),
// had the copy compared with the shared compression's recent inputs, framed
// it (another copy) and passed it down a pipeline of async iterables: with
// 100 streams a commit of 1,000 events (76 KB) was copied 200 times and the
// last stream got it about 100 ms after the first, on a 2-core machine
// (docs/benchmarks/events.md, "Feed at 100 streams: the feed lane"). Here a message's
// envelope (its 5-byte prefix and its bytes, compressed when the client
// accepts it and the message is large enough, as connect would) is made the
// first time a stream sends it and kept by message object, and every stream
// writes that same Buffer.
//
// Only the plain case comes here: gRPC over HTTP/2 (application/grpc or
// +proto), an uncompressed request, no deadline header, a compression
// connect would accept. Anything else (gRPC-Web, Connect, JSON, deadlines,
// compressed requests) goes through connect, which owns those rules. The
// interceptors are the pipeline's, run by connect's own invoker as the
// router runs them (transformInvokeImplementation, as the unary lane uses
// invokeUnaryImplementation), so metrics, the call line, auth, access,
// audit and tracing see the call and its messages as through connect; what
// stays here is reading the one request message and writing gRPC's frames,
// headers and trailers.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import {
  type DescMessage,
  type DescMethod,
  type DescMethodServerStreaming,
  type DescService,
  type Message,
} from "@bufbuild/protobuf";
import { type ConnectError, type ContextValues, type HandlerContext, type MethodImplSpec } from "@connectrpc/connect";
import { createAsyncIterable, transformInvokeImplementation, type Compression } from "@connectrpc/connect/protocol";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { canceled } from "../errors.js";
import { abortOnClose } from "../http/abort-on-close.js";
import { drained } from "../http/drained.js";
import { webHeaders } from "../http/headers.js";
import { plannedToBinary } from "../protobuf/index.js";
import {
  asConnectError,
  GRPC_PROTO_TYPE,
  grpcEnvelope,
  implementedMethods,
  nodeHeaders,
  parseBinaryMessage,
  plainGrpcCompression,
  readGrpcMessage,
} from "./grpc-wire.js";
import type { Pipeline } from "./pipeline.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

export interface FeedLane {
  /**
   * Answers a gRPC Watch when it is the plain case (see the top of this
   * file) and returns true; returns false, having touched nothing, when
   * connect must answer it. `method`: what the request's path names, as the
   * front door resolved it (src/http/arrival.ts).
   */
  serveGrpc(req: Req, res: Res, contextValues: ContextValues, method: DescMethod): boolean;
}

export interface FeedLaneOptions {
  /** The services whose server-streaming methods it serves (the EventService revisions). */
  readonly services: readonly DescService[];
  /** Handler objects keyed by service type name. */
  readonly impls: ReadonlyMap<string, object>;
  /**
   * Interceptors, body limit and compressions: acceptCompression is
   * negotiated as connect does, and feedCompression compresses (it shares
   * one compression of a message with the streams connect serves).
   */
  readonly pipeline: Pipeline;
}

/**
 * Whether the call's HTTP/2 stream is closed: Http2ServerResponse has no
 * `destroyed` of its own (it was always undefined here), so a write after
 * the client went away waited for a drain that never comes (docs/events.md).
 */
function streamGone(res: Http2ServerResponse): boolean {
  return res.stream.destroyed || res.stream.closed;
}

/** Writes `data`; resolves once the stream takes more (at once unless its buffer is full), as connect's adapter waits. */
async function write(res: Http2ServerResponse, data: Buffer): Promise<void> {
  const gone = () => canceled("the client went away");
  if (streamGone(res) || res.writableEnded) throw gone();
  if (!res.write(data) && !(await drained(res, () => streamGone(res)))) throw gone();
}

export function createFeedLane(opts: FeedLaneOptions): FeedLane {
  const { readMaxBytes, acceptCompression } = opts.pipeline;
  const compressions = new Map(opts.pipeline.feedCompression.map((c) => [c.name, c]));
  const interceptors = [...opts.pipeline.interceptors];
  const specs = implementedMethods(opts.services, opts.impls, "server_streaming");

  // A message's envelope by compression name ("" = none), made once for every
  // stream that sends the same message object; gone with the message.
  const envelopes = new WeakMap<object, Map<string, Promise<Buffer>>>();
  function envelopeOf(desc: DescMessage, message: Message, compression: Compression | null): Promise<Buffer> {
    let byName = envelopes.get(message);
    if (byName === undefined) {
      byName = new Map();
      envelopes.set(message, byName);
    }
    const key = compression?.name ?? "";
    let envelope = byName.get(key);
    if (envelope === undefined) {
      envelope = grpcEnvelope(plannedToBinary(desc, message), compression);
      const made = envelope;
      byName.set(key, made);
      // A failed compression is not kept: the next stream tries again (and meets its own error).
      made.catch(() => {
        if (byName.get(key) === made) byName.delete(key);
      });
    }
    return envelope;
  }

  async function answer(
    spec: MethodImplSpec & { kind: "server_streaming" },
    req: Req,
    res: Http2ServerResponse,
    contextValues: ContextValues,
    compression: Compression | null,
  ): Promise<void> {
    const method = spec.method as DescMethodServerStreaming;
    const authority = String(req.headers[":authority"] ?? req.headers.host ?? "localhost");
    const responseHeader = new Headers({ "content-type": "application/grpc+proto" });
    if (compression !== null) responseHeader.set("grpc-encoding", compression.name);
    const context: HandlerContext = {
      method,
      service: method.parent,
      requestMethod: "POST",
      protocolName: "grpc",
      url: `http://${authority}${req.url ?? "/"}`,
      signal: abortOnClose(res, () => canceled("the client went away")),
      timeoutMs: () => undefined,
      requestHeader: webHeaders(req),
      responseHeader,
      responseTrailer: new Headers(),
      values: contextValues,
    };
    let failure: ConnectError | undefined;
    let it: AsyncIterator<Message> | undefined;
    try {
      const message = parseBinaryMessage(
        method.input,
        await readGrpcMessage(req, readMaxBytes),
        readMaxBytes,
        contextValues,
      );
      it = transformInvokeImplementation(
        spec,
        context,
        interceptors,
      )(createAsyncIterable([message]))[Symbol.asyncIterator]() as AsyncIterator<Message>;
      for (let r = await it.next(); r.done !== true; r = await it.next()) {
        const envelope = await envelopeOf(method.output, r.value, compression);
        if (!res.headersSent) res.writeHead(200, nodeHeaders(responseHeader));
        await write(res, envelope);
      }
      it = undefined;
    } catch (e) {
      failure = asConnectError(e);
    } finally {
      // A stream left before its end (the client went away mid-write): end the handler's generators.
      if (it !== undefined) void it.return?.().catch(() => undefined);
    }
    if (streamGone(res) || res.writableEnded) return;
    const trailer = new Headers();
    context.responseTrailer.forEach((value, key) => trailer.append(key, value));
    setTrailerStatus(trailer, failure);
    if (!res.headersSent) res.writeHead(200, nodeHeaders(responseHeader));
    res.addTrailers(nodeHeaders(trailer));
    res.end();
  }

  return {
    serveGrpc(req, res, contextValues, method) {
      if (req.method !== "POST") return false;
      const spec = specs.get(method);
      if (spec === undefined) return false;
      if (!GRPC_PROTO_TYPE.test(req.headers["content-type"] ?? "")) return false;
      const negotiated = plainGrpcCompression(req, acceptCompression);
      if (negotiated === undefined) return false;
      const compression = negotiated === null ? null : (compressions.get(negotiated.name) ?? negotiated);
      answer(spec, req, res as Http2ServerResponse, contextValues, compression).catch(() => res.destroy());
      return true;
    },
  };
}
