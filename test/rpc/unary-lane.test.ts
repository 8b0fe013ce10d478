// The unary lane (src/rpc/unary-lane.ts) answers the plain Connect and gRPC
// unary calls itself; a deadline header sends the same call through connect.
// Every answer must be the same either way: status, content type, body,
// error JSON, gRPC trailers (status, message, details), compression, and the
// request id echoed. Also the lane's own refusals: a gRPC body that is not
// exactly one message is invalid_argument, never internal.
import http2 from "node:http2";
import { gunzipSync } from "node:zlib";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReadRequestSchema, ReadResponseSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { envelope } from "../support/envelopes.js";
import { h2Request, type H2Answer } from "../support/h2.js";

let srv: TestServer;
let session: http2.ClientHttp2Session;
const ids = Array.from({ length: 12 }, (_, i) => `lane-study-${i}`);

beforeAll(async () => {
  srv = await startTestServer();
  const res = await fetch(`${srv.url}/resources/create`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      resources: ids.map((identifier) => ({
        identifier,
        payload_type: "study",
        description: `a study whose description makes the answer longer ${identifier}`,
      })),
    }),
  });
  expect(res.status).toBe(200);
  session = http2.connect(srv.url);
});
afterAll(async () => {
  session?.close();
  await srv?.close();
});

const READ = "/resourcestore.v1.ResourceService/Read";

type Answer = H2Answer;

/** One HTTP/2 request on the file's session. */
const h2 = (path: string, headers: Record<string, string>, body: Uint8Array): Promise<Answer> =>
  h2Request(session, path, headers, body);

/** The two answers agree on everything but the request id (each call gets its own) and the date. */
function comparable(a: Answer): unknown {
  const drop = new Set(["date", "x-request-id", "content-length"]);
  const keep = (h: Record<string, string>) => Object.fromEntries(Object.entries(h).filter(([k]) => !drop.has(k)));
  return { status: a.status, headers: keep(a.headers), trailers: keep(a.trailers), body: a.body.toString("base64") };
}

const readRequest = (identifiers: string[]) => toBinary(ReadRequestSchema, create(ReadRequestSchema, { identifiers }));

describe("Connect unary: lane and connect answer alike", () => {
  // JSON that does not decode is refused by the call interceptor on both
  // paths (the lane, and the guard in front of connect): a request id, a
  // reason and a log line, with connect's own message.
  const variants: [string, Record<string, string>, Uint8Array][] = [
    [
      "JSON read",
      { "content-type": "application/json" },
      Buffer.from(JSON.stringify({ identifiers: ids.slice(0, 2) })),
    ],
    [
      "JSON read, gzip accepted (answer over 1 KiB)",
      { "content-type": "application/json", "accept-encoding": "gzip" },
      Buffer.from(JSON.stringify({ identifiers: ids })),
    ],
    [
      "JSON not found",
      { "content-type": "application/json" },
      Buffer.from(JSON.stringify({ identifiers: ["lane-missing"] })),
    ],
    [
      "JSON invalid identifier",
      { "content-type": "application/json" },
      Buffer.from(JSON.stringify({ identifiers: ["bad id!"] })),
    ],
    ["JSON that does not parse", { "content-type": "application/json" }, Buffer.from("{not json")],
    [
      "JSON of the wrong shape",
      { "content-type": "application/json" },
      Buffer.from(JSON.stringify({ identifiers: 7 })),
    ],
    ["proto read", { "content-type": "application/proto" }, readRequest(ids.slice(0, 3))],
    ["proto that does not parse", { "content-type": "application/proto" }, Buffer.from([0xff, 0xff, 0xff])],
  ];
  for (const [name, headers, body] of variants) {
    it(name, async () => {
      const lane = await h2(READ, { ...headers, "content-length": String(body.length) }, body);
      const viaConnect = await h2(
        READ,
        { ...headers, "content-length": String(body.length), "connect-timeout-ms": "60000" },
        body,
      );
      expect(lane.headers["x-request-id"]).toMatch(/./);
      expect(viaConnect.headers["x-request-id"]).toMatch(/./);
      expect(comparable(lane)).toEqual(comparable(viaConnect));
      expect(lane.status).not.toBe(500);
    });
  }

  it("compresses a large answer the client accepts gzip for, and answers the read", async () => {
    const body = Buffer.from(JSON.stringify({ identifiers: ids }));
    const lane = await h2(
      READ,
      { "content-type": "application/json", "accept-encoding": "gzip", "content-length": String(body.length) },
      body,
    );
    expect(lane.headers["content-encoding"]).toBe("gzip");
    const json = JSON.parse(gunzipSync(lane.body).toString()) as { resources: { identifier: string }[] };
    expect(json.resources.map((r) => r.identifier)).toEqual(ids);
  });

  it("the same over HTTP/1.1", async () => {
    const ask = (extra: Record<string, string>) =>
      fetch(srv.url + READ, {
        method: "POST",
        headers: { "content-type": "application/json", ...extra },
        body: JSON.stringify({ identifiers: ["lane-missing", ids[0]] }),
      });
    const [a, b] = await Promise.all([ask({}), ask({ "connect-timeout-ms": "60000" })]);
    expect(a.status).toBe(b.status);
    expect(await a.text()).toBe(await b.text());
  });
});

describe("gRPC unary over HTTP/2: lane and connect answer alike", () => {
  const grpcHeaders = { "content-type": "application/grpc", te: "trailers" };
  const variants: [string, Record<string, string>, Buffer][] = [
    ["read", {}, envelope(readRequest(ids.slice(0, 2)))],
    [
      "read, gzip accepted (answer over 1 KiB)",
      { "grpc-accept-encoding": "identity,deflate,gzip" },
      envelope(readRequest(ids)),
    ],
    ["not found (trailers with status, message and details)", {}, envelope(readRequest(["lane-missing"]))],
    ["invalid identifier", {}, envelope(readRequest(["bad id!"]))],
  ];
  for (const [name, headers, body] of variants) {
    it(name, async () => {
      const lane = await h2(READ, { ...grpcHeaders, ...headers }, body);
      const viaConnect = await h2(READ, { ...grpcHeaders, ...headers, "grpc-timeout": "60S" }, body);
      expect(lane.trailers["grpc-status"] ?? lane.headers["grpc-status"]).toMatch(/^\d+$/);
      expect(lane.trailers["x-request-id"] ?? lane.headers["x-request-id"]).toMatch(/./);
      expect(comparable(lane)).toEqual(comparable(viaConnect));
    });
  }

  it("answers the read: one message, grpc-status 0", async () => {
    const a = await h2(READ, grpcHeaders, envelope(readRequest(ids.slice(0, 3))));
    expect(a.status).toBe(200);
    expect(a.trailers["grpc-status"]).toBe("0");
    expect(a.body[0]).toBe(0);
    expect(a.body.readUInt32BE(1)).toBe(a.body.length - 5);
    const msg = fromBinary(ReadResponseSchema, a.body.subarray(5));
    expect(msg.resources.map((r) => r.identifier)).toEqual(ids.slice(0, 3));
  });

  it("a body that is not exactly one message is invalid_argument, never internal", async () => {
    const message = readRequest(ids.slice(0, 1));
    const bodies = [
      Buffer.alloc(0),
      Buffer.from([0, 0, 0]),
      envelope(Buffer.from([0xff, 0xff, 0xff])),
      Buffer.concat([envelope(message), envelope(message)]),
      envelope(message).subarray(0, 8),
    ];
    for (const body of bodies) {
      const a = await h2(READ, grpcHeaders, body);
      expect(a.status).toBe(200);
      expect(a.trailers["grpc-status"] ?? a.headers["grpc-status"]).toBe("3");
      // Refused by the call interceptor: logged, with a request id.
      expect(a.trailers["x-request-id"] ?? a.headers["x-request-id"]).toMatch(/./);
    }
  });
});
