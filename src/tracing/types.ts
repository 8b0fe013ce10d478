// What tracing hands the rest of the service, with no OpenTelemetry import:
// the call log reads traceIdKey, app.ts takes a Tracing. Both index.ts and
// the SDK side (otel.ts) import it, so neither imports the other statically.
import { createContextKey, type Code, type Interceptor } from "@connectrpc/connect";
import type { ObjectStorage } from "../storage/index.js";
import type { Db } from "../store/index.js";

/** The trace id of the call's span, set by the tracing interceptor for the call's log line. */
export const traceIdKey = createContextKey<string | undefined>(undefined, { description: "the call span's trace id" });

/** What `startTracing` builds; absent when tracing is off. */
export interface Tracing {
  /** Makes every call a span continuing the caller's `traceparent`: goes into the interceptor list. */
  readonly interceptor: Interceptor;
  /**
   * A call answered without the interceptors (refused at the front door, a
   * cached constant document): its span, from `started` (process.hrtime.bigint()) to now;
   * `code` undefined = ok. Returns the span's trace id for the call's log line.
   */
  recordCall(
    rpc: string,
    code: Code | undefined,
    headers: Readonly<Record<string, string | string[] | undefined>>,
    started: bigint,
  ): string;
  /** The same database with a span for every statement and transaction run within a traced call. */
  traceDb(db: Db): Db;
  /** The same object storage with a span for every request to S3 made within a traced call. */
  traceStorage(storage: ObjectStorage): ObjectStorage;
  /** Exports what is buffered and unregisters the SDK. */
  shutdown(): Promise<void>;
}

export interface TracingOptions {
  /**
   * Where finished spans go: an SDK `SpanExporter` (typed loosely so that
   * this file needs no OpenTelemetry type). Default: the OTLP/HTTP exporter,
   * configured by the SDK's OTEL_EXPORTER_OTLP_* variables.
   */
  readonly exporter?: unknown;
  /** Export each span as it ends (tests) instead of in batches. */
  readonly simple?: boolean;
  /** `service.version` of the resource; OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES still apply. */
  readonly serviceVersion?: string;
}
