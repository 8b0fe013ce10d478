// Tracing on (docs/tracing.md): a call over gRPC, a stream, a REST call and an
// object-storage call each continue the caller's W3C trace, with child spans
// for their statements (their text, never their values) and S3 requests, and
// the call's log line carries the trace id. Spans go to the SDK's in-memory
// exporter; the same runs on PGlite and, when reachable, PostgreSQL.
import { randomBytes } from "node:crypto";
import { InMemorySpanExporter, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createResourceStoreClient } from "../../src/client/index.js";
import { startTracing, type Tracing } from "../../src/tracing/index.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { logLines } from "../support/log-lines.js";
import { createTestDatabase, postgresReachable, REQUIRE_POSTGRES, type TestDatabase } from "../support/postgres.js";

function traceparent(): { header: string; traceId: string; spanId: string } {
  const traceId = randomBytes(16).toString("hex");
  const spanId = randomBytes(8).toString("hex");
  return { header: `00-${traceId}-${spanId}-01`, traceId, spanId };
}

/** The spans under `root` (children, grandchildren, ...). */
function descendants(spans: readonly ReadableSpan[], root: ReadableSpan): ReadableSpan[] {
  const ids = new Set([root.spanContext().spanId]);
  const out: ReadableSpan[] = [];
  let grew = true;
  while (grew) {
    grew = false;
    for (const s of spans) {
      const parent = s.parentSpanContext?.spanId;
      if (parent !== undefined && ids.has(parent) && !ids.has(s.spanContext().spanId)) {
        ids.add(s.spanContext().spanId);
        out.push(s);
        grew = true;
      }
    }
  }
  return out;
}

/** The one server span continuing `tp`; it and every span under it are in its trace. */
function callSpan(
  spans: readonly ReadableSpan[],
  tp: { traceId: string; spanId: string },
  name: string,
): { call: ReadableSpan; under: ReadableSpan[] } {
  const calls = spans.filter((s) => s.kind === SpanKind.SERVER && s.parentSpanContext?.spanId === tp.spanId);
  expect(calls.map((s) => s.name)).toEqual([name]);
  const call = calls[0]!;
  expect(call.spanContext().traceId).toBe(tp.traceId);
  const under = descendants(spans, call);
  for (const s of under) expect(s.spanContext().traceId).toBe(tp.traceId);
  return { call, under };
}

const statements = (spans: readonly ReadableSpan[]) => spans.filter((s) => s.attributes["db.query.text"] !== undefined);

const backends: {
  name: string;
  env: () => Promise<{ env: Record<string, string>; done: () => Promise<void> } | undefined>;
}[] = [
  { name: "pglite", env: () => Promise.resolve({ env: {}, done: () => Promise.resolve() }) },
  {
    name: "postgres",
    env: async () => {
      if (!(await postgresReachable())) {
        if (REQUIRE_POSTGRES) throw new Error("PostgreSQL is required (REQUIRE_POSTGRES=1) but not reachable");
        return undefined;
      }
      const db: TestDatabase = await createTestDatabase();
      return { env: { DATABASE_URL: db.url }, done: () => db.drop() };
    },
  },
];

describe.each(backends)("tracing on $name", ({ name, env }) => {
  const exporter = new InMemorySpanExporter();
  let tracing: Tracing;
  let srv: TestServer | undefined;
  let done: (() => Promise<void>) | undefined;
  const log = logLines("info");

  beforeAll(async () => {
    const backend = await env();
    if (backend === undefined) return;
    done = backend.done;
    tracing = await startTracing({ exporter, simple: true });
    srv = await startTestServer(backend.env, { tracing }, log.logger);
  });
  afterAll(async () => {
    await srv?.close();
    await tracing?.shutdown();
    await done?.();
  });
  afterEach(() => exporter.reset());

  const client = (transport: "grpc" | "connect") => createResourceStoreClient({ baseUrl: srv!.url, transport });

  it("a gRPC call continues the caller's trace, its statements are its children, its log line has the trace id", async (t) => {
    if (srv === undefined) return t.skip();
    const tp = traceparent();
    const id = `tr-grpc-${name}-${randomBytes(4).toString("hex")}`;
    const secret = `value-${randomBytes(6).toString("hex")}`;
    await client("grpc").resources.create(
      { resources: [{ identifier: id, payload: { case: "study", value: { description: secret } } }] },
      { headers: { traceparent: tp.header, "x-request-id": `req-${id}` } },
    );
    const spans = exporter.getFinishedSpans();
    const { call, under } = callSpan(spans, tp, "resourcestore.v2.ResourceService/Create");
    expect(call.attributes["rpc.system"]).toBe("grpc");
    expect(call.attributes["rpc.grpc.status_code"]).toBe(0);
    const sql = statements(under);
    expect(sql.length).toBeGreaterThan(0);
    // The write's statements, its INSERT among them, inside its transaction span, a child of the call.
    expect(sql.some((s) => /\bINSERT INTO\b/i.test(String(s.attributes["db.query.text"])))).toBe(true);
    const tx = under.filter((s) => s.name === "transaction");
    expect(tx.map((s) => s.parentSpanContext?.spanId)).toEqual([call.spanContext().spanId]);
    for (const s of sql) expect(s.parentSpanContext?.spanId).toBe(tx[0]!.spanContext().spanId);
    for (const s of sql) {
      expect(s.kind).toBe(SpanKind.CLIENT);
      expect(s.attributes["db.system.name"]).toBe("postgresql");
      expect(s.attributes["resource_store.db.backend"]).toBe(name === "pglite" ? "pglite" : "postgres");
    }
    // The values sent are bound parameters: no span holds them.
    expect(JSON.stringify(spans.map((s) => s.attributes))).not.toContain(secret);
    expect(JSON.stringify(spans.map((s) => s.attributes))).not.toContain(id);
    const line = log.records().find((l) => l.request_id === `req-${id}`);
    expect(line).toMatchObject({
      msg: "call",
      rpc: "resourcestore.v2.ResourceService/Create",
      code: "ok",
      trace_id: tp.traceId,
    });
  });

  it("a streamed answer's statements are children of its call span, which ends with the stream", async (t) => {
    if (srv === undefined) return t.skip();
    const c = client("grpc");
    const ids = Array.from({ length: 3 }, (_, i) => `tr-stream-${name}-${i}`);
    await c.resources.create({
      resources: ids.map((identifier) => ({ identifier, payload: { case: "annotation", value: { label: "x" } } })),
    });
    exporter.reset();
    const tp = traceparent();
    let chunks = 0;
    for await (const _ of c.query.queryParquet(
      { payloadType: "annotation", identifiers: ids, filters: [] },
      { headers: { traceparent: tp.header } },
    ))
      chunks++;
    expect(chunks).toBeGreaterThan(0);
    const { call, under } = callSpan(exporter.getFinishedSpans(), tp, "resourcestore.v2.QueryService/QueryParquet");
    expect(call.attributes["rpc.grpc.status_code"]).toBe(0);
    const sql = statements(under);
    expect(sql.length).toBeGreaterThan(0);
    // The call span lasts until its last statement has finished.
    const end = (s: ReadableSpan) => s.endTime[0] * 1e9 + s.endTime[1];
    for (const s of sql) expect(end(s)).toBeLessThanOrEqual(end(call));
  });

  it("a REST call continues the caller's trace; its request's log line has the trace id", async (t) => {
    if (srv === undefined) return t.skip();
    const tp = traceparent();
    const id = `tr-rest-${name}`;
    const res = await fetch(`${srv.url}/resources/create`, {
      method: "POST",
      headers: { "content-type": "application/json", traceparent: tp.header, "x-request-id": `req-${id}` },
      body: JSON.stringify({ resources: [{ identifier: id, payload_type: "study", modality: "CT" }] }),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const { call, under } = callSpan(exporter.getFinishedSpans(), tp, "resourcestore.v2.ResourceService/Create");
    expect(call.attributes["rpc.grpc.status_code"]).toBe(0);
    expect(statements(under).some((s) => /\bINSERT INTO\b/i.test(String(s.attributes["db.query.text"])))).toBe(true);
    // The request's one line (written when the response closes).
    const deadline = Date.now() + 5000;
    while (!log.records().some((l) => l.request_id === `req-${id}`) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    expect(log.records().find((l) => l.request_id === `req-${id}`)).toMatchObject({
      msg: "call",
      path: "/resources/create",
      status: 200,
      trace_id: tp.traceId,
    });
  });

  it("an object-storage call is a child span; a failed call's span carries its code", async (t) => {
    if (srv === undefined) return t.skip();
    const tp = traceparent();
    const res = await fetch(
      `${srv.url}/s3/list?prefix=${encodeURIComponent(`s3://${srv.app.storage.bucket}/nothing/`)}`,
      { headers: { traceparent: tp.header } },
    );
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const { under } = callSpan(exporter.getFinishedSpans(), tp, "resourcestore.v2.StorageService/List");
    expect(under.map((s) => s.name)).toEqual(["S3.ListObjects"]);
    expect(under[0]!.attributes).toMatchObject({ "rpc.system": "aws-api", "aws.s3.bucket": srv.app.storage.bucket });

    // A refusal is still a call span, with its code; a caller's mistake is not the span's error.
    const bad = traceparent();
    const refused = await fetch(`${srv.url}/resources/update`, {
      method: "POST",
      headers: { "content-type": "application/json", traceparent: bad.header },
      body: JSON.stringify({ updates: { nobody: { description: "x" } } }),
    });
    const answer = (await refused.json()) as { code: string };
    expect(refused.status).toBeGreaterThanOrEqual(400);
    expect(refused.status).toBeLessThan(500);
    const { call } = callSpan(exporter.getFinishedSpans(), bad, "resourcestore.v2.ResourceService/Update");
    expect(call.attributes["rpc.grpc.status_code"]).not.toBe(0);
    expect(String(call.attributes["error.type"]).toLowerCase()).toBe(answer.code.replaceAll("_", ""));
    expect(call.status.code).toBe(SpanStatusCode.UNSET);
  });

  it("a call without traceparent starts a trace of its own, and statements outside calls make no span", async (t) => {
    if (srv === undefined) return t.skip();
    await client("connect").resources.read({ identifiers: ["nothing-here"] });
    const spans = exporter.getFinishedSpans();
    const roots = spans.filter((s) => s.kind === SpanKind.SERVER);
    expect(roots.map((s) => s.name)).toEqual(["resourcestore.v2.ResourceService/Read"]);
    expect(roots[0]!.parentSpanContext).toBeUndefined();
    expect(roots[0]!.attributes["rpc.system"]).toBe("connect_rpc");
    exporter.reset();
    await srv.app.db.query("SELECT 1");
    expect(exporter.getFinishedSpans()).toEqual([]);
    // The SDK is the registered provider while tracing is on.
    const probe = trace.getTracer("t").startSpan("probe");
    expect(probe.isRecording()).toBe(true);
    probe.end();
  });
});

describe("tracing a call refused before the interceptors", () => {
  const exporter = new InMemorySpanExporter();
  let tracing: Tracing;
  let srv: TestServer;
  const log = logLines("info");
  beforeAll(async () => {
    tracing = await startTracing({ exporter, simple: true });
    srv = await startTestServer({ API_TOKENS: "tok-tracing=read" }, { tracing }, log.logger);
  });
  afterAll(async () => {
    await srv?.close();
    await tracing?.shutdown();
  });

  it("a call refused at the front door (no credentials) is a span in the caller's trace, with its code and trace id logged", async () => {
    const tp = traceparent();
    const res = await fetch(`${srv.url}/resources/read`, {
      method: "POST",
      headers: { "content-type": "application/json", traceparent: tp.header, "x-request-id": "req-refused" },
      body: JSON.stringify({ identifiers: ["x"] }),
    });
    expect(res.status).toBe(401);
    await res.arrayBuffer();
    const { call, under } = callSpan(exporter.getFinishedSpans(), tp, "resourcestore.v2.ResourceService/Read");
    expect(under).toEqual([]);
    expect(call.attributes).toMatchObject({ "rpc.grpc.status_code": 16, "error.type": "Unauthenticated" });
    const deadline = Date.now() + 5000;
    while (!log.records().some((l) => l.request_id === "req-refused") && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    expect(log.records().find((l) => l.request_id === "req-refused")).toMatchObject({ trace_id: tp.traceId });
  });
});
