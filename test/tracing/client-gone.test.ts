// A client that goes away mid-stream (docs/tracing.md): its call
// span ends `Canceled` on every surface, where a change-feed stream over
// SSE, Connect and gRPC-Web ended `OK` (the feed ends quietly when its
// call's signal aborts); and a reflection stream the client cuts (as `buf`
// does) is `Canceled`, not `Internal` with a stack trace in the log.
import http from "node:http";
import http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import type { ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { InMemorySpanExporter } from "@opentelemetry/sdk-trace-base";
import { createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ServerReflectionRequestSchema } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";
import { startTracing, type Tracing } from "../../src/tracing/index.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { envelope } from "../support/envelopes.js";
import { logLines } from "../support/log-lines.js";

const exporter = new InMemorySpanExporter();
let tracing: Tracing;
let srv: TestServer;
const log = logLines("info");

beforeAll(async () => {
  tracing = await startTracing({ exporter, simple: true });
  srv = await startTestServer({ EVENTS_HEARTBEAT_MS: "600000" }, { tracing }, log.logger);
});
afterAll(async () => {
  await srv?.close();
  await tracing?.shutdown();
});

/** The finished server span named `name` with attribute x-request-id `id`, once there is one. */
async function spanOf(name: string, since: number): Promise<ReadableSpan> {
  const end = Date.now() + 5000;
  for (;;) {
    const found = exporter
      .getFinishedSpans()
      .slice(since)
      .find((s) => s.name === name);
    if (found !== undefined || Date.now() > end) {
      expect(found, `a finished span ${name}`).toBeDefined();
      return found!;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function watchThenLeave(transport: Transport): Promise<void> {
  const ac = new AbortController();
  const it = createClient(EventService, transport).watch({}, { signal: ac.signal })[Symbol.asyncIterator]();
  await it.next();
  ac.abort();
  await it.next().catch(() => undefined);
}

const surfaces: [string, () => Promise<void>][] = [
  ["gRPC", () => watchThenLeave(createGrpcTransport({ baseUrl: srv.url }))],
  ["gRPC-Web", () => watchThenLeave(createGrpcWebTransport({ baseUrl: srv.url, httpVersion: "1.1" }))],
  ["Connect", () => watchThenLeave(createConnectTransport({ baseUrl: srv.url, httpVersion: "1.1" }))],
  [
    "SSE",
    () =>
      new Promise<void>((resolve, reject) => {
        const req = http.get(`${srv.url}/events`, (res) => {
          res.once("data", () => {
            req.destroy();
            resolve();
          });
        });
        req.on("error", (e) => (req.destroyed ? resolve() : reject(e)));
      }),
  ],
];

describe("a client that goes away mid-stream", () => {
  it.each(surfaces)("%s: the Watch span ends Canceled", async (_name, leave) => {
    const since = exporter.getFinishedSpans().length;
    await leave();
    const span = await spanOf("resourcestore.v2.EventService/Watch", since);
    expect(span.attributes["error.type"]).toBe("Canceled");
    expect(span.attributes["rpc.grpc.status_code"]).toBe(1);
  });

  it("a reflection stream cut by its client is Canceled, and logged without a stack", async () => {
    const since = exporter.getFinishedSpans().length;
    const session = http2.connect(srv.url);
    const stream = session.request({
      ":method": "POST",
      ":path": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
      "content-type": "application/grpc+proto",
      te: "trailers",
    });
    const req = create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } });
    stream.write(envelope(toBinary(ServerReflectionRequestSchema, req)));
    await new Promise<void>((resolve) => stream.once("data", () => resolve()));
    // buf's way out: the connection goes, the stream never half-closed.
    session.destroy();
    const span = await spanOf("grpc.reflection.v1.ServerReflection/ServerReflectionInfo", since);
    expect(span.attributes["error.type"]).toBe("Canceled");
    const line = log.calls((r) => r.rpc === "grpc.reflection.v1.ServerReflection/ServerReflectionInfo").at(-1);
    expect(String(line?.code).toLowerCase()).toBe("canceled");
    expect(JSON.stringify(line)).not.toMatch(/stack/);
  });
});
