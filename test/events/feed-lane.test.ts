// The feed lane (src/rpc/feed-lane.ts): a plain gRPC Watch gets each feed
// message as one envelope made once for every stream that sends it (issue
// 33, 100 streams: through connect each stream serialized, compared and
// framed its own copy of a 76 KB message). A deadline header sends the same
// call through connect; both must answer alike: headers, messages and the
// trailers of a refused request.
import { connect, type ClientHttp2Session, type IncomingHttpHeaders } from "node:http2";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import type { Compression } from "@connectrpc/connect/protocol";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { WatchRequestSchema, WatchResponseSchema } from "../../gen/resourcestore/type/v1/event_pb.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { envelope, envelopeReader, unwrapped, type Envelope } from "../support/envelopes.js";

// Every input the feed's compressions are asked to compress, whichever path asks.
const asked = vi.hoisted(() => ({ inputs: [] as Uint8Array[] }));
vi.mock("../../src/rpc/shared-compression.js", async (importOriginal) => {
  const orig = await importOriginal<{ sharedCompression: (base: Compression, opts?: object) => Compression }>();
  return {
    ...orig,
    sharedCompression: (base: Compression, opts?: object): Compression => {
      const c = orig.sharedCompression(base, opts);
      return {
        ...c,
        compress: (input) => {
          asked.inputs.push(Uint8Array.from(input));
          return c.compress(input);
        },
      };
    },
  };
});

const PATH = "/resourcestore.v2.EventService/Watch";
/** Resources in the commit watched: its message is above the 1 KiB compression threshold. */
const COUNT = 40;

interface RawStream {
  readonly headers: Promise<Record<string, string>>;
  /** Resolves once the first message came (the read point). */
  readonly opened: Promise<void>;
  /** The first message that holds events, as it came on the wire. */
  readonly firstEvents: Promise<Envelope>;
  /** Headers and trailers once the stream ends. */
  readonly ended: Promise<{ headers: Record<string, string>; trailers: Record<string, string> }>;
  close(): void;
}

const plain = (h: IncomingHttpHeaders): Record<string, string> =>
  Object.fromEntries(Object.entries(h).map(([k, v]) => [k, String(v)]));

/** A raw gRPC Watch on `session`; `viaConnect` adds a deadline header, which leaves the call to connect. */
function watch(
  session: ClientHttp2Session,
  viaConnect: boolean,
  body: Uint8Array = toBinary(WatchRequestSchema, create(WatchRequestSchema, {})),
): RawStream {
  const req = session.request({
    ":method": "POST",
    ":path": PATH,
    "content-type": "application/grpc+proto",
    te: "trailers",
    "grpc-accept-encoding": "gzip",
    ...(viaConnect ? { "grpc-timeout": "600S" } : {}),
  });
  req.end(envelope(body));
  let open!: () => void;
  let found!: (e: Envelope) => void;
  const opened = new Promise<void>((r) => (open = r));
  const firstEvents = new Promise<Envelope>((r) => (found = r));
  const headers = new Promise<Record<string, string>>((resolve, reject) => {
    req.once("response", (h) => resolve(plain(h)));
    req.once("error", reject);
  });
  let trailers: Record<string, string> = {};
  req.on("trailers", (t) => (trailers = plain(t)));
  const ended = new Promise<{ headers: Record<string, string>; trailers: Record<string, string> }>(
    (resolve, reject) => {
      req.once("end", () => void headers.then((h) => resolve({ headers: h, trailers })));
      req.once("error", reject);
    },
  );
  req.on(
    "data",
    envelopeReader((e) => {
      open();
      if (fromBinary(WatchResponseSchema, unwrapped(e)).events.length > 0) found(e);
    }),
  );
  return { headers, opened, firstEvents, ended, close: () => req.close() };
}

/** What both paths must agree on: everything but the date and each call's own request id. */
function comparable(h: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(h).filter(([k]) => k !== "date" && k !== "x-request-id"));
}

describe("the feed lane", () => {
  let srv: TestServer;
  let session: ClientHttp2Session;

  beforeAll(async () => {
    srv = await startTestServer({ EVENTS_HEARTBEAT_MS: "200" });
    session = connect(srv.url);
  }, 60_000);
  afterAll(async () => {
    session?.close();
    await srv?.close();
  });

  it("frames and compresses a commit once for all its gRPC streams, and answers as connect does", async () => {
    const lane = Array.from({ length: 4 }, () => watch(session, false));
    const viaConnect = watch(session, true);
    const all = [...lane, viaConnect];
    try {
      await Promise.all(all.map((s) => s.opened));
      asked.inputs.length = 0;
      const resources = Array.from({ length: COUNT }, (_, i) => ({
        identifier: `lane-${String(i).padStart(3, "0")}`,
        payload_type: "datasource",
        name: `source ${i}`,
      }));
      const r = await fetch(`${srv.url}/resources/create`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ resources }),
      });
      expect(r.status).toBe(200);
      const got = await Promise.all(all.map((s) => s.firstEvents));
      // Every stream, lane or connect, got the same envelope: gzipped, the commit's 40 events.
      for (const e of got) {
        expect(e.flags).toBe(1);
        expect(e.data.equals(got[0]!.data)).toBe(true);
      }
      const message = unwrapped(got[0]!);
      expect(fromBinary(WatchResponseSchema, message).events.map((e) => e.identifier)).toEqual(
        resources.map((x) => x.identifier),
      );
      // Asked to compress the message once for the four lane streams, and once more by connect's stream (which shares the output).
      const asks = asked.inputs.filter((input) => Buffer.compare(input, message) === 0).length;
      expect(asks).toBe(2);
      // The same response headers either way.
      expect(comparable(await lane[0]!.headers)).toEqual(comparable(await viaConnect.headers));
    } finally {
      for (const s of all) s.close();
    }
  }, 60_000);

  it("refuses a request that is not a WatchRequest with the same trailers as connect", async () => {
    const bad = Buffer.from([0x0a, 0xff, 0xff, 0xff]);
    const [a, b] = await Promise.all([watch(session, false, bad).ended, watch(session, true, bad).ended]);
    expect(a.trailers["grpc-status"]).toBe("3");
    expect(a.trailers["x-request-id"] ?? a.headers["x-request-id"]).toBeDefined();
    expect({ headers: comparable(a.headers), trailers: comparable(a.trailers) }).toEqual({
      headers: comparable(b.headers),
      trailers: comparable(b.trailers),
    });
  }, 60_000);
});
