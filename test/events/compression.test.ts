// The feed's compression (docs/events.md, "Memory and load"): a
// client that accepts gzip gets the feed's messages gzipped, on gRPC,
// gRPC-Web and Connect alike, and each message is compressed once for every
// stream that sends it, not once per stream (with 100 streams that was 100
// gzips of every commit). A client that accepts no compression gets the
// messages as they are, and a Watch request sent gzipped is still read.
import { connect } from "node:http2";
import { gzipSync } from "node:zlib";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { createClient, type Transport } from "@connectrpc/connect";
import {
  compressionGzip,
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import {
  WatchRequestSchema,
  WatchResponseSchema,
  type WatchResponse,
} from "../../gen/resourcestore/type/v1/event_pb.js";
import { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { envelope, envelopeReader, unwrapped, type Envelope } from "../support/envelopes.js";

const PATH = "/resourcestore.v2.EventService/Watch";
/** Resources in the one commit watched: its message is well above connect's 1 KiB compression threshold. */
const COUNT = 40;

/** A stream's messages as they came on the wire: flags and (still compressed) data; trailers and end-stream frames left out. */
interface RawStream {
  /** The response header naming the messages' compression (grpc-encoding or connect-content-encoding), if any. */
  readonly encoding: Promise<string | undefined>;
  /** Resolves once the first message was taken (the stream is open at the read point). */
  readonly opened: Promise<void>;
  /** Resolves with the first message that holds events. */
  readonly firstEvents: Promise<Envelope>;
  close(): void;
}

/** Decodes one message, gunzipping it when its envelope says so. */
function decode(e: Envelope): WatchResponse {
  return fromBinary(WatchResponseSchema, unwrapped(e));
}

function collector(): { onMessage: (e: Envelope) => void; opened: Promise<void>; firstEvents: Promise<Envelope> } {
  let open!: () => void;
  let found!: (e: Envelope) => void;
  const opened = new Promise<void>((r) => (open = r));
  const firstEvents = new Promise<Envelope>((r) => (found = r));
  return {
    opened,
    firstEvents,
    onMessage(e) {
      open();
      // Heartbeats and the read point are small and never compressed: decode to see whether events came.
      if (decode(e).events.length > 0) found(e);
    },
  };
}

/** A raw gRPC Watch over HTTP/2 with the given request headers; `gzipRequest` sends the request message gzipped. */
function grpcRaw(base: string, accept: string, gzipRequest = false): RawStream {
  const session = connect(base);
  const c = collector();
  const req = session.request({
    ":method": "POST",
    ":path": PATH,
    "content-type": "application/grpc+proto",
    te: "trailers",
    "grpc-accept-encoding": accept,
    ...(gzipRequest ? { "grpc-encoding": "gzip" } : {}),
  });
  const body = toBinary(WatchRequestSchema, create(WatchRequestSchema, {}));
  req.end(gzipRequest ? envelope(gzipSync(body), 1) : envelope(body));
  const encoding = new Promise<string | undefined>((resolve, reject) => {
    req.once("response", (h) => resolve(h["grpc-encoding"] as string | undefined));
    req.once("error", reject);
  });
  req.on("data", envelopeReader(c.onMessage));
  return {
    encoding,
    opened: c.opened,
    firstEvents: c.firstEvents,
    close: () => {
      req.close();
      session.close();
    },
  };
}

/** A raw gRPC-Web or Connect streaming Watch over HTTP/1.1, accepting gzip. */
function http1Raw(base: string, protocol: "grpc-web" | "connect"): RawStream {
  const ac = new AbortController();
  const c = collector();
  const headers: Record<string, string> =
    protocol === "grpc-web"
      ? { "content-type": "application/grpc-web+proto", "x-grpc-web": "1", "grpc-accept-encoding": "gzip" }
      : {
          "content-type": "application/connect+proto",
          "connect-protocol-version": "1",
          "connect-accept-encoding": "gzip",
        };
  const res = fetch(base + PATH, {
    method: "POST",
    headers,
    body: envelope(toBinary(WatchRequestSchema, create(WatchRequestSchema, {}))),
    signal: ac.signal,
  });
  const encoding = res.then((r) => {
    expect(r.status).toBe(200);
    const read = envelopeReader(c.onMessage);
    void (async () => {
      try {
        for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) read(chunk);
      } catch {
        // aborted at the end of the test
      }
    })();
    return r.headers.get(protocol === "grpc-web" ? "grpc-encoding" : "connect-content-encoding") ?? undefined;
  });
  return { encoding, opened: c.opened, firstEvents: c.firstEvents, close: () => ac.abort() };
}

/** A stream through connect-node's client (which accepts gzip by default): its first message with events, decoded by the client. */
function clientStream(transport: Transport): {
  opened: Promise<void>;
  firstEvents: Promise<WatchResponse>;
  close(): void;
} {
  const ac = new AbortController();
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  const firstEvents = (async () => {
    for await (const m of createClient(EventService, transport).watch({}, { signal: ac.signal })) {
      open();
      if (m.events.length > 0) return m;
    }
    throw new Error("the stream ended without events");
  })();
  return { opened, firstEvents, close: () => ac.abort() };
}

describe("the feed's compression", () => {
  let srv: TestServer;

  beforeAll(async () => {
    srv = await startTestServer({ EVENTS_HEARTBEAT_MS: "200" });
  }, 60_000);
  afterAll(async () => {
    await srv?.close();
  });

  it("gzips each message once for all its streams; gRPC, gRPC-Web and Connect get it gzipped and whole", async () => {
    const spy = vi.spyOn(compressionGzip, "compress");
    const raw: Record<string, RawStream> = {
      grpc: grpcRaw(srv.url, "gzip"),
      "grpc (request gzipped)": grpcRaw(srv.url, "gzip", true),
      "grpc-web": http1Raw(srv.url, "grpc-web"),
      connect: http1Raw(srv.url, "connect"),
      "grpc, no compression accepted": grpcRaw(srv.url, "identity"),
    };
    const clients = {
      grpc: clientStream(createGrpcTransport({ baseUrl: srv.url })),
      "grpc-web": clientStream(createGrpcWebTransport({ baseUrl: srv.url, httpVersion: "1.1" })),
      connect: clientStream(createConnectTransport({ baseUrl: srv.url, httpVersion: "2" })),
    };
    try {
      await Promise.all([...Object.values(raw).map((s) => s.opened), ...Object.values(clients).map((s) => s.opened)]);
      const resources = Array.from({ length: COUNT }, (_, i) => ({
        identifier: `gz-${String(i).padStart(3, "0")}`,
        payload_type: "datasource",
        name: `source ${i}`,
      }));
      const r = await fetch(`${srv.url}/resources/create`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ resources }),
      });
      expect(r.status).toBe(200);

      const want = resources.map((x) => x.identifier);
      const got: Record<string, WatchResponse> = {};
      for (const [name, s] of Object.entries(raw)) {
        const e = await s.firstEvents;
        const accepted = name !== "grpc, no compression accepted";
        expect({ name, encoding: await s.encoding, compressed: (e.flags & 1) === 1 }).toEqual({
          name,
          encoding: accepted ? "gzip" : undefined,
          compressed: accepted,
        });
        got[name] = decode(e);
      }
      for (const [name, s] of Object.entries(clients)) got[`${name} (connect-node client)`] = await s.firstEvents;
      for (const [name, m] of Object.entries(got)) {
        expect({ name, events: m.events.map((e) => [e.identifier, e.kind, Number(e.version)]) }).toEqual({
          name,
          events: want.map((id) => [id, "created", 1]),
        });
      }

      // The one message's bytes, as every binary stream sent them: compressed once (7 streams accept gzip).
      const bytes = toBinary(WatchResponseSchema, got.grpc!);
      expect(bytes.byteLength).toBeGreaterThan(1024);
      const compressions = spy.mock.calls.filter(([input]) => Buffer.compare(input, bytes) === 0).length;
      expect(compressions).toBe(1);
    } finally {
      spy.mockRestore();
      for (const s of Object.values(raw)) s.close();
      for (const s of Object.values(clients)) s.close();
    }
  }, 60_000);
});
