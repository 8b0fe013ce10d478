// The client's gRPC transport: connect-node's createGrpcTransport, except
// that a unary answer is decoded by its plan (protobuf/planned-from-binary.ts)
// instead of protobuf-es's reflective fromBinary. The message is the same
// (the plan falls back to fromBinary for anything it does not cover, and
// test/protobuf/planned-from-binary.test.ts compares both); a page of 100
// versions decoded reflectively cost the client about as long as the whole
// statement behind it took PostgreSQL (BENCHMARKS.md, "History page").
//
// connect offers no hook for a transport's deserialization, so `unary` below
// is connect's own gRPC unary (@connectrpc/connect/protocol-grpc,
// transport.ts, 2.1.1) line for line, with one change: the serialization
// of the output. The options are built as connect-node's
// validateNodeTransportOptions builds them for HTTP/2 (not exported), and
// streams go through connect's transport on the same HTTP/2 session.
import { toBinary, type DescMessage, type DescMethodUnary, type Message } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextValues, type Interceptor, type Transport, type UnaryResponse } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip, createNodeHttpClient, Http2SessionManager } from "@connectrpc/connect-node";
import {
  createAsyncIterable,
  createMethodSerializationLookup,
  createMethodUrl,
  limitSerialization,
  pipe,
  pipeTo,
  runUnaryCall,
  transformCompressEnvelope,
  transformDecompressEnvelope,
  transformJoinEnvelopes,
  transformParseEnvelope,
  transformSerializeEnvelope,
  transformSplitEnvelope,
  validateReadWriteMaxBytes,
  type CommonTransportOptions,
  type Compression,
  type MethodSerializationLookup,
  type Serialization,
} from "@connectrpc/connect/protocol";
import { createTransport, headerGrpcStatus, requestHeaderWithCompression, validateResponseWithCompression, validateTrailer } from "@connectrpc/connect/protocol-grpc";
import { plannedFromBinary } from "../protobuf/index.js";

export interface PlannedGrpcTransportOptions {
  readonly baseUrl: string;
  readonly interceptors?: readonly Interceptor[];
  /** connect-node's default: gzip and brotli. */
  readonly acceptCompression?: Compression[];
}

/** The output's binary serialization by plan, with the errors and limits connect's own has (createBinarySerialization). */
function plannedOutput(desc: DescMessage, opt: CommonTransportOptions): Serialization<Message> {
  return limitSerialization<Message>(
    {
      parse(data) {
        try {
          return plannedFromBinary(desc, data);
        } catch (e) {
          const m = e instanceof Error ? e.message : String(e);
          throw new ConnectError(`parse binary: ${m}`, Code.Internal);
        }
      },
      serialize(data) {
        try {
          return toBinary(desc, data);
        } catch (e) {
          const m = e instanceof Error ? e.message : String(e);
          throw new ConnectError(`serialize binary: ${m}`, Code.Internal);
        }
      },
    },
    opt,
  );
}

/** createGrpcTransport's transport, its unary answers decoded by plan. */
export function createPlannedGrpcTransport(options: PlannedGrpcTransportOptions): Transport {
  const sessionManager = new Http2SessionManager(options.baseUrl);
  const opt: CommonTransportOptions = {
    baseUrl: options.baseUrl,
    httpClient: createNodeHttpClient({ httpVersion: "2", sessionProvider: () => sessionManager }),
    useBinaryFormat: true,
    interceptors: [...(options.interceptors ?? [])],
    sendCompression: null,
    acceptCompression: options.acceptCompression ?? [compressionGzip, compressionBrotli],
    ...validateReadWriteMaxBytes(undefined, undefined, undefined),
  };
  const streams = createTransport(opt);
  // connect builds these per call; they depend only on the method.
  type Serializations = { input: Serialization<Message>; output: Serialization<Message> };
  const lookups = new WeakMap<DescMethodUnary, Serializations>();
  const serializationOf = (method: DescMethodUnary): Serializations => {
    const known = lookups.get(method);
    if (known !== undefined) return known;
    const lookup: MethodSerializationLookup<DescMessage, DescMessage> = createMethodSerializationLookup(method, opt.binaryOptions, opt.jsonOptions, opt);
    const made = { input: lookup.getI(true), output: plannedOutput(method.output, opt) };
    lookups.set(method, made);
    return made;
  };
  return {
    async unary(method, signal, timeoutMs, header, message, contextValues) {
      const serialization = serializationOf(method);
      timeoutMs = timeoutMs === undefined ? opt.defaultTimeoutMs : timeoutMs <= 0 ? undefined : timeoutMs;
      return await runUnaryCall({
        interceptors: opt.interceptors,
        signal,
        timeoutMs,
        req: {
          stream: false,
          service: method.parent,
          method,
          requestMethod: "POST",
          url: createMethodUrl(opt.baseUrl, method),
          header: requestHeaderWithCompression(opt.useBinaryFormat, timeoutMs, header, opt.acceptCompression, opt.sendCompression),
          contextValues: contextValues ?? createContextValues(),
          message,
        },
        next: async (req) => {
          const uRes = await opt.httpClient({
            url: req.url,
            method: "POST",
            header: req.header,
            signal: req.signal,
            body: pipe(
              createAsyncIterable([req.message]),
              transformSerializeEnvelope(serialization.input),
              transformCompressEnvelope(opt.sendCompression, opt.compressMinBytes),
              transformJoinEnvelopes(),
              { propagateDownStreamError: true },
            ),
          });
          const { compression, headerError } = validateResponseWithCompression(opt.acceptCompression, uRes.status, uRes.header);
          const message = await pipeTo(
            uRes.body,
            transformSplitEnvelope(opt.readMaxBytes),
            transformDecompressEnvelope(compression ?? null, opt.readMaxBytes),
            transformParseEnvelope(serialization.output),
            async (iterable) => {
              let message: unknown;
              for await (const chunk of iterable) {
                if (message !== undefined) throw new ConnectError("protocol error: received extra output message for unary method", Code.Unimplemented);
                message = chunk;
              }
              return message;
            },
            { propagateDownStreamError: false },
          );
          validateTrailer(uRes.trailer, uRes.header);
          if (message === undefined) {
            // Trailers only response
            if (headerError) throw headerError;
            throw new ConnectError("protocol error: missing output message for unary method", uRes.trailer.has(headerGrpcStatus) ? Code.Unimplemented : Code.Unknown);
          }
          if (headerError) throw new ConnectError("protocol error: received output message for unary method with error status", Code.Unknown);
          return { stream: false, service: method.parent, method, header: uRes.header, message, trailer: uRes.trailer } as UnaryResponse<never, never>;
        },
      });
    },
    stream: streams.stream.bind(streams),
  };
}
