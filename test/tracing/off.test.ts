// Tracing off (docs/tracing.md): without OTEL_EXPORTER_OTLP_ENDPOINT the service
// loads no OpenTelemetry SDK module, registers nothing, and its log lines
// have no trace id. This file imports nothing of OpenTelemetry before it
// checks; it runs in a process of its own (vitest.config.ts, ISOLATED). The SDK's
// packages are CommonJS: whatever loaded them, an import included, left them
// in the require cache. The API package alone is loaded by prom-client (for
// its exemplars) whatever we do: it stays the no-op it is until an SDK
// registers.
import { createRequire } from "node:module";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createResourceStoreClient } from "../../src/client/index.js";
import { loadConfig } from "../../src/config.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { logLines } from "../support/log-lines.js";

const loadedOtel = (): string[] =>
  Object.keys(createRequire(import.meta.url).cache).filter(
    (path) => path.includes("@opentelemetry") && !path.includes("@opentelemetry/api/"),
  );
/** Where the API keeps what an SDK registered (its global tracer provider, context manager, propagator). */
const API_GLOBALS = Symbol.for("opentelemetry.js.api.1");

let srv: TestServer;
const log = logLines("info");
beforeAll(async () => {
  srv = await startTestServer({}, {}, log.logger);
});
afterAll(async () => {
  await srv?.close();
});

describe("tracing off", () => {
  it("is on only with an OTLP endpoint, and off again when the SDK is disabled", () => {
    expect(loadConfig({}).tracing).toBe(false);
    expect(loadConfig({ OTEL_SERVICE_NAME: "x", OTEL_TRACES_SAMPLER: "always_on" }).tracing).toBe(false);
    expect(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" }).tracing).toBe(true);
    expect(loadConfig({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://collector:4318/v1/traces" }).tracing).toBe(true);
    expect(
      loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318", OTEL_SDK_DISABLED: "true" }).tracing,
    ).toBe(false);
    expect(
      loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318", OTEL_TRACES_EXPORTER: "none" }).tracing,
    ).toBe(false);
  });

  it("loads no OpenTelemetry SDK module, registers nothing, even for calls with a traceparent, and logs no trace id", async () => {
    const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const client = createResourceStoreClient({ baseUrl: srv.url, transport: "grpc" });
    await client.resources.create(
      { resources: [{ identifier: "off-1", payload: { case: "study", value: { modality: "CT" } } }] },
      { headers: { traceparent, "x-request-id": "off-grpc" } },
    );
    const res = await fetch(`${srv.url}/resources/read`, {
      method: "POST",
      headers: { "content-type": "application/json", traceparent, "x-request-id": "off-rest" },
      body: JSON.stringify({ identifiers: ["off-1"] }),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expect(loadedOtel()).toEqual([]);
    expect((globalThis as Record<symbol, unknown>)[API_GLOBALS]).toBeUndefined();
    const deadline = Date.now() + 5000;
    while (
      log.records().filter((l) => l.request_id === "off-grpc" || l.request_id === "off-rest").length < 2 &&
      Date.now() < deadline
    ) {
      await new Promise((r) => setTimeout(r, 10));
    }
    const calls = log.records().filter((l) => l.request_id === "off-grpc" || l.request_id === "off-rest");
    expect(calls.map((l) => l.msg)).toEqual(["call", "call"]);
    for (const l of calls) expect(l).not.toHaveProperty("trace_id");

    // Loaded now, by this test only: nothing registered a provider, so the API is its no-op.
    const { trace, context } = await import("@opentelemetry/api");
    const span = trace.getTracer("probe").startSpan("probe");
    expect(span.isRecording()).toBe(false);
    expect(span.spanContext().traceId).toBe("00000000000000000000000000000000");
    expect(trace.getSpan(context.active())).toBeUndefined();
  });
});
