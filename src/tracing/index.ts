// Distributed tracing (OpenTelemetry), on only when configured. This file
// imports nothing of OpenTelemetry: the SDK (./otel.ts) is loaded by a
// dynamic import in startTracing, so a service without
// OTEL_EXPORTER_OTLP_ENDPOINT never loads it, and without a Tracing object
// nothing is wrapped: no interceptor in the list, the Db and the object
// storage are the bare ones. What remains on the hot path is one lookup of
// traceIdKey by the call log line (src/rpc/interceptors.ts).
import type { Tracing, TracingOptions } from "./types.js";

export { traceIdKey, type Tracing, type TracingOptions } from "./types.js";

/** Loads the OpenTelemetry SDK, registers it globally (tracer provider, context manager, W3C propagator) and answers what wraps the service. */
export async function startTracing(options: TracingOptions = {}): Promise<Tracing> {
  const otel = await import("./otel.js");
  return otel.createTracing(options);
}
