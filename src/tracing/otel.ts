// The OpenTelemetry side of tracing: loaded only by startTracing (index.ts),
// never by a static import, so that a service without tracing never loads it.
//
// Statement spans come from wrapping our own Db (every statement of both
// backends goes through its query/exec/transaction), not from
// instrumentation-pg: that one patches the `pg` module when it is loaded,
// which an ES module imports statically long before the configuration is
// read, and it knows nothing of PGlite. Object-storage spans wrap the
// ObjectStorage interface the same way (the AWS SDK's instrumentation has the
// same load-order problem). Only statements and requests made inside a
// traced call get a span: start-up migrations and background work (the
// change feed's shared poller) would otherwise be a
// stream of root spans nobody asked for.
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type TextMapGetter,
  type Tracer,
} from "@opentelemetry/api";
import { Code, ConnectError, type Interceptor, type StreamResponse } from "@connectrpc/connect";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { detectResources, envDetector, resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, SimpleSpanProcessor, type SpanExporter } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import {
  ATTR_DB_OPERATION_NAME,
  ATTR_DB_QUERY_TEXT,
  ATTR_DB_RESPONSE_STATUS_CODE,
  ATTR_DB_SYSTEM_NAME,
  ATTR_ERROR_TYPE,
  ATTR_SERVICE_NAME,
  ATTR_SERVICE_VERSION,
  DB_SYSTEM_NAME_VALUE_POSTGRESQL,
} from "@opentelemetry/semantic-conventions";
import type { ObjectStorage } from "../storage/index.js";
import type { Db, Queryable, TransactionOptions } from "../store/index.js";
import { traceIdKey, type Tracing, type TracingOptions } from "./types.js";

const headersGetter: TextMapGetter<Headers> = {
  keys: (h) => [...h.keys()],
  get: (h, key) => h.get(key) ?? undefined,
};

type NodeHeaders = Readonly<Record<string, string | string[] | undefined>>;
const nodeHeadersGetter: TextMapGetter<NodeHeaders> = {
  keys: (h) => Object.keys(h),
  get: (h, key) => h[key],
};

/** Codes that mean the server failed (the span is an error); the others are the caller's (OpenTelemetry's RPC conventions). */
const SERVER_FAULTS: ReadonlySet<Code> = new Set([
  Code.Unknown,
  Code.DeadlineExceeded,
  Code.Unimplemented,
  Code.Internal,
  Code.Unavailable,
  Code.DataLoss,
]);

function rpcSystem(contentType: string | null | undefined): string {
  return contentType?.startsWith("application/grpc") === true ? "grpc" : "connect_rpc";
}

/** Ends a call span with its outcome: the code only, never a message (which may quote what the caller sent). */
function endCall(span: Span, code: Code | undefined): void {
  span.setAttribute("rpc.grpc.status_code", code ?? 0);
  if (code !== undefined) {
    span.setAttribute(ATTR_ERROR_TYPE, Code[code]);
    if (SERVER_FAULTS.has(code)) span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end();
}

/**
 * A streamed answer whose messages are produced inside the call's context
 * (a generator runs in the context of whoever calls next(), here connect's
 * writer): its statements are the call's children, and the call span ends
 * with the last message, a failure, or the client going away.
 */
function bindStream<T>(
  source: AsyncIterable<T>,
  ctx: Context,
  signal: AbortSignal,
  done: (code: Code | undefined) => void,
): AsyncIterable<T> {
  // A stream that ends because its call was aborted (the change feed ends
  // quietly when its client goes away) ended with the abort's code, not OK.
  const ended = (): Code | undefined =>
    signal.aborted ? (signal.reason instanceof ConnectError ? signal.reason.code : Code.Canceled) : undefined;
  return {
    [Symbol.asyncIterator]() {
      const it = context.with(ctx, () => source[Symbol.asyncIterator]());
      let finished = false;
      const finish = (code: Code | undefined): void => {
        if (finished) return;
        finished = true;
        done(code);
      };
      return {
        async next() {
          try {
            const r = await context.with(ctx, () => it.next());
            if (r.done === true) finish(ended());
            return r;
          } catch (err) {
            finish(ConnectError.from(err).code);
            throw err;
          }
        },
        async return(value?: unknown) {
          try {
            return it.return !== undefined
              ? await context.with(ctx, () => it.return!(value))
              : { done: true as const, value: value as T };
          } finally {
            finish(Code.Canceled);
          }
        },
        async throw(err?: unknown) {
          try {
            if (it.throw === undefined) throw err;
            return await context.with(ctx, () => it.throw!(err));
          } finally {
            finish(ConnectError.from(err).code);
          }
        },
      };
    },
  };
}

function createCallInterceptor(tracer: Tracer): Interceptor {
  return (next) => async (req) => {
    const parent = propagation.extract(ROOT_CONTEXT, req.header, headersGetter);
    const span = tracer.startSpan(
      `${req.service.typeName}/${req.method.name}`,
      {
        kind: SpanKind.SERVER,
        attributes: {
          "rpc.system": rpcSystem(req.header.get("content-type")),
          "rpc.service": req.service.typeName,
          "rpc.method": req.method.name,
        },
      },
      parent,
    );
    const ctx = trace.setSpan(parent, span);
    req.contextValues.set(traceIdKey, span.spanContext().traceId);
    let res;
    try {
      res = await context.with(ctx, () => next(req));
    } catch (err) {
      endCall(span, ConnectError.from(err).code);
      throw err;
    }
    if (!res.stream) {
      endCall(span, undefined);
      return res;
    }
    const stream: StreamResponse = {
      ...res,
      message: bindStream(res.message, ctx, req.signal, (code) => endCall(span, code)),
    };
    return stream;
  };
}

/** The first keyword of a statement (SELECT, INSERT, WITH, ...): its span's name. */
function operationOf(sql: string): string {
  const m = /^\s*([A-Za-z]+)/.exec(sql);
  return m === null ? "SQL" : (m[1] as string).toUpperCase();
}

/** A SQLSTATE, never the message (pg's messages and details can quote stored values). */
function sqlStateOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === "string" && /^[0-9A-Z]{5}$/.test(code)) return code;
  const cause = (err as { cause?: unknown } | null)?.cause;
  return cause !== undefined && cause !== err ? sqlStateOf(cause) : undefined;
}

function failSpan(span: Span, err: unknown, attribute: string | undefined, value: string | undefined): void {
  if (attribute !== undefined && value !== undefined) span.setAttribute(attribute, value);
  span.setAttribute(ATTR_ERROR_TYPE, value ?? (err instanceof Error ? err.name : "error"));
  span.setStatus({ code: SpanStatusCode.ERROR });
}

/** Runs `fn` in a child span of `parent` (when there is a call span in it); without one, just runs it. */
async function inSpan<T>(
  tracer: Tracer,
  parent: Context,
  name: string,
  attributes: Attributes,
  fn: (ctx: Context) => Promise<T>,
  sqlState: boolean,
): Promise<T> {
  if (trace.getSpan(parent) === undefined) return fn(parent);
  const span = tracer.startSpan(name, { kind: SpanKind.CLIENT, attributes }, parent);
  const ctx = trace.setSpan(parent, span);
  try {
    return await context.with(ctx, () => fn(ctx));
  } catch (err) {
    failSpan(span, err, sqlState ? ATTR_DB_RESPONSE_STATUS_CODE : undefined, sqlState ? sqlStateOf(err) : undefined);
    throw err;
  } finally {
    span.end();
  }
}

function statementAttributes(sql: string, backend: Db["kind"]): Attributes {
  // The text only: parameter values are never recorded.
  return {
    [ATTR_DB_SYSTEM_NAME]: DB_SYSTEM_NAME_VALUE_POSTGRESQL,
    [ATTR_DB_OPERATION_NAME]: operationOf(sql),
    [ATTR_DB_QUERY_TEXT]: sql,
    "resource_store.db.backend": backend,
  };
}

/** A Queryable whose statements are children of `parentOf()` (the active context, or a transaction's span). */
function traceQueryable(tracer: Tracer, q: Queryable, backend: Db["kind"], parentOf: () => Context): Queryable {
  return {
    query: <R>(sql: string, params?: readonly unknown[]) =>
      inSpan(
        tracer,
        parentOf(),
        operationOf(sql),
        statementAttributes(sql, backend),
        () => q.query<R>(sql, params),
        true,
      ),
    exec: (sql: string) =>
      inSpan(tracer, parentOf(), operationOf(sql), statementAttributes(sql, backend), () => q.exec(sql), true),
  };
}

/**
 * A COPY's pieces, with one span from the first pull to the last piece (or
 * the consumer stopping): the export's one statement, child of the context
 * the COPY was asked for in.
 */
async function* traceCopyOut(
  tracer: Tracer,
  parent: Context,
  copyOut: NonNullable<Db["copyOut"]>,
  sql: string,
  params: readonly unknown[],
  backend: Db["kind"],
): AsyncGenerator<Uint8Array> {
  if (trace.getSpan(parent) === undefined) {
    yield* copyOut(sql, params);
    return;
  }
  const span = tracer.startSpan(
    "COPY",
    { kind: SpanKind.CLIENT, attributes: { ...statementAttributes(sql, backend), [ATTR_DB_OPERATION_NAME]: "COPY" } },
    parent,
  );
  try {
    yield* copyOut(sql, params);
  } catch (err) {
    const state = sqlStateOf(err);
    failSpan(span, err, state !== undefined ? ATTR_DB_RESPONSE_STATUS_CODE : undefined, state);
    throw err;
  } finally {
    span.end();
  }
}

function traceDb(tracer: Tracer, db: Db): Db {
  const root = traceQueryable(tracer, db, db.kind, () => context.active());
  const reader = db.reader?.bind(db);
  const copyOut = db.copyOut;
  return {
    ...db,
    query: root.query.bind(root),
    exec: root.exec.bind(root),
    transaction<T>(fn: (tx: Queryable) => Promise<T>, options?: TransactionOptions): Promise<T> {
      const attributes: Attributes = {
        [ATTR_DB_SYSTEM_NAME]: DB_SYSTEM_NAME_VALUE_POSTGRESQL,
        "resource_store.db.backend": db.kind,
      };
      if (options?.readOnlySnapshot === true) attributes["resource_store.db.read_only_snapshot"] = true;
      // The transaction's statements hang under its span, whatever context the backend's queue runs them in.
      return inSpan(
        tracer,
        context.active(),
        "transaction",
        attributes,
        (ctx) => db.transaction((tx) => fn(traceQueryable(tracer, tx, db.kind, () => ctx)), options),
        true,
      );
    },
    ...(reader !== undefined
      ? { reader: async (point: string | undefined) => traceDb(tracer, await reader(point)) }
      : {}),
    ...(copyOut !== undefined
      ? {
          copyOut: (sql: string, params: readonly unknown[]) =>
            traceCopyOut(tracer, context.active(), copyOut, sql, params, db.kind),
        }
      : {}),
  };
}

function traceStorage(tracer: Tracer, storage: ObjectStorage): ObjectStorage {
  // The bucket, never a key: keys are paths callers chose.
  const request = <T>(operation: string, fn: () => Promise<T>): Promise<T> =>
    inSpan(
      tracer,
      context.active(),
      `S3.${operation}`,
      { "rpc.system": "aws-api", "rpc.service": "S3", "rpc.method": operation, "aws.s3.bucket": storage.bucket },
      fn,
      false,
    );
  // Every member named, no spread: a method added to ObjectStorage fails to compile here until it is traced or passed on.
  return {
    client: storage.client,
    bucket: storage.bucket,
    publicEndpoint: storage.publicEndpoint,
    // Presigning signs offline: no request, no span.
    presignUpload: (key, expiresIn) => storage.presignUpload(key, expiresIn),
    presignDownload: (key, expiresIn) => storage.presignDownload(key, expiresIn),
    close: () => storage.close(),
    listKeys: (prefix, stopAfter) => request("ListObjects", () => storage.listKeys(prefix, stopAfter)),
    listObjects: (prefix, stopAfter) => request("ListObjects", () => storage.listObjects(prefix, stopAfter)),
    headObject: (key) => request("HeadObject", () => storage.headObject(key)),
    readRange: (key, start, end, etag) => request("GetObject", () => storage.readRange(key, start, end, etag)),
    ping: () => request("HeadBucket", () => storage.ping()),
  };
}

export function createTracing(options: TracingOptions): Tracing {
  const exporter = (options.exporter as SpanExporter | undefined) ?? new OTLPTraceExporter();
  // Our name unless OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES say otherwise.
  const resource = resourceFromAttributes({
    [ATTR_SERVICE_NAME]: "resource-store",
    ...(options.serviceVersion !== undefined ? { [ATTR_SERVICE_VERSION]: options.serviceVersion } : {}),
  }).merge(detectResources({ detectors: [envDetector] }));
  // The sampler comes from OTEL_TRACES_SAMPLER(_ARG) (default: follow the caller, else sample all).
  const provider = new NodeTracerProvider({
    resource,
    spanProcessors: [options.simple === true ? new SimpleSpanProcessor(exporter) : new BatchSpanProcessor(exporter)],
  });
  provider.register({ propagator: new W3CTraceContextPropagator() });
  const tracer = provider.getTracer("resource-store", options.serviceVersion);
  return {
    interceptor: createCallInterceptor(tracer),
    recordCall(rpc, code, headers, started) {
      const parent = propagation.extract(ROOT_CONTEXT, headers, nodeHeadersGetter);
      const startTime = new Date(Date.now() - Number(process.hrtime.bigint() - started) / 1e6);
      const slash = rpc.lastIndexOf("/");
      const contentType = headers["content-type"];
      const span = tracer.startSpan(
        rpc,
        {
          kind: SpanKind.SERVER,
          startTime,
          attributes: {
            "rpc.system": rpcSystem(typeof contentType === "string" ? contentType : undefined),
            "rpc.service": rpc.slice(0, slash),
            "rpc.method": rpc.slice(slash + 1),
          },
        },
        parent,
      );
      endCall(span, code);
      return span.spanContext().traceId;
    },
    traceDb: (db) => traceDb(tracer, db),
    traceStorage: (storage) => traceStorage(tracer, storage),
    async shutdown() {
      try {
        await provider.shutdown();
      } finally {
        trace.disable();
        context.disable();
        propagation.disable();
      }
    },
  };
}
