// A client process for test/events/dead-client.test.ts: opens a Watch of
// both revisions (or GET /v1/events and /v2/events) on one surface and
// reads forever, until the test kills it with SIGKILL. It never ends a
// stream itself: the server must notice the client is gone on its own.
// Usage: node --import tsx test/events/watch-client.ts SURFACE URL
import http from "node:http";
import http2 from "node:http2";
import { createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { EventService as EventServiceV1 } from "../../gen/resourcestore/v1/event_service_pb.js";
import { EventService as EventServiceV2 } from "../../gen/resourcestore/v2/event_service_pb.js";

const [surface, url] = process.argv.slice(2) as [string, string];

async function drain(it: AsyncIterable<unknown>): Promise<void> {
  for await (const _ of it) void _;
}

function rpc(transport: Transport, opts: { timeoutMs?: number } = {}): void {
  for (const svc of [EventServiceV1, EventServiceV2]) void drain(createClient(svc, transport).watch({}, opts));
}

switch (surface) {
  // The plain case: the feed lane (src/rpc/feed-lane.ts).
  case "grpc":
    rpc(createGrpcTransport({ baseUrl: url }));
    break;
  // A deadline sends the call through connect's own gRPC handler instead.
  case "grpc-deadline":
    rpc(createGrpcTransport({ baseUrl: url }), { timeoutMs: 3_600_000 });
    break;
  case "grpc-web":
    rpc(createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1" }));
    break;
  case "connect":
    rpc(createConnectTransport({ baseUrl: url, httpVersion: "1.1" }));
    break;
  case "connect-json-h2":
    rpc(createConnectTransport({ baseUrl: url, httpVersion: "2", useBinaryFormat: false }));
    break;
  case "sse":
    for (const rev of ["v1", "v2"]) http.get(`${url}/${rev}/events`, (res) => res.resume());
    break;
  case "sse-h2": {
    const session = http2.connect(url);
    for (const rev of ["v1", "v2"]) session.request({ ":method": "GET", ":path": `/${rev}/events` }).resume();
    break;
  }
  default:
    throw new Error(`unknown surface ${surface}`);
}
// Keeps the process alive whatever the streams do.
setInterval(() => undefined, 60_000);
