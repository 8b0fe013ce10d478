// Compressed requests (src/rpc/binary-guard.ts): a body or message in an
// encoding the server offers is decompressed once, by the guard, and then
// checked like an uncompressed one. So a compressed request answers as the
// same request uncompressed, and a compressed one that is malformed (a
// message that does not parse, or bytes that are not valid data of the
// named compression) is invalid_argument MALFORMED_BODY with a request id
// and a call log line on every wire: Connect (unary, JSON and binary),
// gRPC, gRPC-Web, a server-streaming call and a bidi stream. Before, connect
// decoded these itself, before any interceptor: a gzip body holding a
// message that does not parse, or a gzip stream cut short, was `internal`
// (HTTP 500, or grpc-status 13), with no request id and no log line.
// The REST gateway (src/http/read-body.ts) decodes a gzip or br body too,
// where it read the compressed bytes as JSON ("not valid JSON"), and refuses
// any other content-encoding with 415.
import http2 from "node:http2";
import { brotliCompressSync, gzipSync } from "node:zlib";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import { ReadRequestSchema, ReadResponseSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { envelope, envelopeReader, webTrailers } from "../support/envelopes.js";
import { h2Request, type H2Answer } from "../support/h2.js";
import { logLines } from "../support/log-lines.js";

const BODY_LIMIT = 64 * 1024;
const log = logLines("info");
let srv: TestServer;
let session: http2.ClientHttp2Session;
const ids = ["cb-study-1", "cb-study-2"];

beforeAll(async () => {
  srv = await startTestServer({ MAX_BODY_BYTES: String(BODY_LIMIT) }, {}, log.logger);
  const res = await fetch(`${srv.url}/resources/create`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ resources: ids.map((identifier) => ({ identifier, payload_type: "study" })) }),
  });
  expect(res.status).toBe(200);
  session = http2.connect(srv.url);
}, 60_000);
afterAll(async () => {
  session?.close();
  await srv?.close();
});

const READ = "/resourcestore.v1.ResourceService/Read";
const QUERY_PARQUET = "/resourcestore.v1.QueryService/QueryParquet";
const REFLECTION = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";

type Answer = H2Answer;

/** One HTTP/2 request on the file's session. */
const h2 = (path: string, headers: Record<string, string>, body: Uint8Array): Promise<Answer> =>
  h2Request(session, path, headers, body);

/** The messages of an enveloped answer (not gRPC-Web's trailer frame), and gRPC-Web's trailers. */
function messagesOf(a: Answer): { messages: Buffer[]; webTrailers: Record<string, string> } {
  const messages: Buffer[] = [];
  envelopeReader((e) => messages.push(e.data))(a.body);
  return { messages, webTrailers: webTrailers(a.body) };
}

/** A gzip stream cut short: valid as far as it goes. */
const cut = (bytes: Uint8Array): Buffer => {
  const z = gzipSync(bytes);
  return z.subarray(0, z.length - 6);
};
const readBytes = toBinary(ReadRequestSchema, create(ReadRequestSchema, { identifiers: ids }));
const readJson = Buffer.from(JSON.stringify({ identifiers: ids }));
/** Bytes that are not a ReadRequest (a field 15 of wire type 7). */
const notAMessage = Buffer.from([0xff, 0xff, 0xff]);
const compressions = { gzip: gzipSync, br: brotliCompressSync } as const;

const grpc = (encoding: string) => ({
  "content-type": "application/grpc+proto",
  te: "trailers",
  "grpc-encoding": encoding,
});
const grpcWeb = (encoding: string) => ({ "content-type": "application/grpc-web+proto", "grpc-encoding": encoding });

/** The answer's status as a gRPC status number, for every wire. */
function grpcStatus(a: Answer): string | undefined {
  return a.trailers["grpc-status"] ?? a.headers["grpc-status"] ?? messagesOf(a).webTrailers["grpc-status"];
}

describe("a compressed request answers as the same request uncompressed", () => {
  const identifiersOf = (bytes: Uint8Array) => fromBinary(ReadResponseSchema, bytes).resources.map((r) => r.identifier);

  for (const [name, compress] of Object.entries(compressions)) {
    it(`Connect unary, binary and JSON (${name})`, async () => {
      const bin = await h2(
        READ,
        { "content-type": "application/proto", "content-encoding": name },
        compress(readBytes),
      );
      expect(bin.status, bin.body.toString()).toBe(200);
      expect(identifiersOf(bin.body)).toEqual(ids);
      const json = await h2(READ, { "content-type": "application/json", "content-encoding": name }, compress(readJson));
      expect(json.status, json.body.toString()).toBe(200);
      expect(
        (JSON.parse(json.body.toString()) as { resources: { identifier: string }[] }).resources.map(
          (r) => r.identifier,
        ),
      ).toEqual(ids);
    });

    it(`gRPC and gRPC-Web unary, a compressed message (${name})`, async () => {
      for (const headers of [grpc(name), grpcWeb(name)]) {
        const a = await h2(READ, headers, envelope(compress(readBytes), 1));
        expect(grpcStatus(a), JSON.stringify(a.trailers)).toBe("0");
        expect(identifiersOf(messagesOf(a).messages[0]!)).toEqual(ids);
      }
    });
  }

  it("a server-streaming call (QueryParquet) with a compressed request message", async () => {
    const query = toBinary(QueryRequestSchema, create(QueryRequestSchema, { payloadType: "study" }));
    const a = await h2(QUERY_PARQUET, grpc("gzip"), envelope(gzipSync(query), 1));
    expect(grpcStatus(a), JSON.stringify(a.trailers)).toBe("0");
    expect(messagesOf(a).messages.length).toBeGreaterThan(0);
  });

  it("a bidi stream (reflection) with a compressed message among uncompressed ones", async () => {
    const ask = toBinary(
      ServerReflectionRequestSchema,
      create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } }),
    );
    const a = await h2(
      REFLECTION,
      grpc("gzip"),
      Buffer.concat([envelope(ask), envelope(gzipSync(ask), 1), envelope(ask)]),
    );
    expect(grpcStatus(a), JSON.stringify(a.trailers)).toBe("0");
    const answers = messagesOf(a).messages.map(
      (m) => fromBinary(ServerReflectionResponseSchema, m).messageResponse.case,
    );
    expect(answers).toEqual(["listServicesResponse", "listServicesResponse", "listServicesResponse"]);
  });
});

describe("a compressed request that is malformed is invalid_argument with a request id, never internal", () => {
  const NOT_A_READ = "the request body is not a valid resourcestore.type.v1.ReadRequest message";
  const cases: [string, Record<string, string>, Uint8Array, string][] = [
    [
      "Connect binary: gzip holding no message",
      { "content-type": "application/proto", "content-encoding": "gzip" },
      gzipSync(notAMessage),
      NOT_A_READ,
    ],
    [
      "Connect binary: br holding no message",
      { "content-type": "application/proto", "content-encoding": "br" },
      brotliCompressSync(notAMessage),
      NOT_A_READ,
    ],
    [
      "Connect binary: cut gzip",
      { "content-type": "application/proto", "content-encoding": "gzip" },
      cut(readBytes),
      "the request body is not valid gzip data (as its content-encoding header says)",
    ],
    [
      "Connect binary: not gzip at all",
      { "content-type": "application/proto", "content-encoding": "gzip" },
      Buffer.from("plain text"),
      "the request body is not valid gzip data (as its content-encoding header says)",
    ],
    [
      "Connect JSON: cut gzip",
      { "content-type": "application/json", "content-encoding": "gzip" },
      cut(readJson),
      "the request body is not valid gzip data (as its content-encoding header says)",
    ],
    [
      "Connect JSON: gzip holding JSON that does not decode",
      { "content-type": "application/json", "content-encoding": "gzip" },
      gzipSync('{"identifiers": 5}'),
      "cannot decode field resourcestore.type.v1.ReadRequest.identifiers from JSON: expected Array, got 5",
    ],
    ["gRPC: gzip holding no message", grpc("gzip"), envelope(gzipSync(notAMessage), 1), NOT_A_READ],
    [
      "gRPC: cut gzip",
      grpc("gzip"),
      envelope(cut(readBytes), 1),
      "the request message is not valid gzip data (as its grpc-encoding header says)",
    ],
    ["gRPC-Web: gzip holding no message", grpcWeb("gzip"), envelope(gzipSync(notAMessage), 1), NOT_A_READ],
    [
      "gRPC-Web: cut br",
      grpcWeb("br"),
      envelope(brotliCompressSync(readBytes).subarray(0, 4), 1),
      "the request message is not valid br data (as its grpc-encoding header says)",
    ],
  ];

  for (const [name, headers, body, message] of cases) {
    it(name, async () => {
      const requestId = `cb-${name.replace(/[^a-z]+/gi, "-")}`;
      const a = await h2(READ, { ...headers, "x-request-id": requestId }, body);
      if (headers["content-type"]!.startsWith("application/grpc")) {
        expect(a.status).toBe(200);
        expect(grpcStatus(a)).toBe("3");
        const web = messagesOf(a).webTrailers["grpc-message"];
        expect(decodeURIComponent(a.trailers["grpc-message"] ?? a.headers["grpc-message"] ?? web ?? "")).toBe(message);
      } else {
        expect(a.status).toBe(400);
        const err = JSON.parse(a.body.toString()) as {
          code: string;
          message: string;
          details: { debug?: { reason?: string } }[];
        };
        expect(err).toMatchObject({ code: "invalid_argument", message });
        expect(err.details[0]?.debug?.reason).toBe("MALFORMED_BODY");
      }
      expect(a.headers["x-request-id"] ?? a.trailers["x-request-id"] ?? messagesOf(a).webTrailers["x-request-id"]).toBe(
        requestId,
      );
      const calls = log.calls((r) => r.request_id === requestId);
      expect(calls).toEqual([
        expect.objectContaining({ rpc: "resourcestore.v1.ResourceService/Read", code: "InvalidArgument" }),
      ]);
    });
  }

  it("a server-streaming call whose compressed request message is cut", async () => {
    const query = toBinary(QueryRequestSchema, create(QueryRequestSchema, { payloadType: "study" }));
    const a = await h2(QUERY_PARQUET, grpc("gzip"), envelope(cut(query), 1));
    expect(grpcStatus(a)).toBe("3");
    expect(decodeURIComponent(a.trailers["grpc-message"] ?? "")).toBe(
      "the request message is not valid gzip data (as its grpc-encoding header says)",
    );
  });

  it("a bidi stream: a cut compressed message ends it invalid_argument after the answers before it", async () => {
    const ask = toBinary(
      ServerReflectionRequestSchema,
      create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } }),
    );
    const a = await h2(REFLECTION, grpc("gzip"), Buffer.concat([envelope(ask), envelope(cut(ask), 1)]));
    expect(grpcStatus(a)).toBe("3");
    expect(decodeURIComponent(a.trailers["grpc-message"] ?? "")).toBe(
      "a request message is not valid gzip data (as its grpc-encoding header says)",
    );
    expect(messagesOf(a).messages.length).toBeLessThanOrEqual(1);
  });
});

describe("limits and encodings the server does not offer stay as connect answers them", () => {
  // Twice the body limit once decompressed, a few hundred bytes on the wire.
  const big = toBinary(
    ReadRequestSchema,
    create(ReadRequestSchema, { identifiers: Array.from({ length: (2 * BODY_LIMIT) / 16 }, () => "x".repeat(14)) }),
  );

  it("a body over the limit once decompressed is resource_exhausted on Connect and gRPC", async () => {
    expect(big.length).toBeGreaterThan(BODY_LIMIT);
    const connect = await h2(READ, { "content-type": "application/proto", "content-encoding": "gzip" }, gzipSync(big));
    expect(connect.status).toBe(429);
    expect(JSON.parse(connect.body.toString())).toMatchObject({ code: "resource_exhausted" });
    const g = await h2(READ, grpc("gzip"), envelope(gzipSync(big), 1));
    expect(grpcStatus(g)).toBe("8");
  });

  it("a bidi message over the limit once decompressed is resource_exhausted", async () => {
    const huge = toBinary(
      ServerReflectionRequestSchema,
      create(ServerReflectionRequestSchema, {
        host: "h".repeat(2 * BODY_LIMIT),
        messageRequest: { case: "listServices", value: "" },
      }),
    );
    const a = await h2(REFLECTION, grpc("gzip"), envelope(gzipSync(huge), 1));
    expect(grpcStatus(a)).toBe("8");
  });

  it("an encoding the server does not offer is unimplemented", async () => {
    const a = await h2(
      READ,
      { "content-type": "application/proto", "content-encoding": "deflate" },
      gzipSync(readBytes),
    );
    expect(a.status).toBe(501);
    expect(JSON.parse(a.body.toString())).toMatchObject({ code: "unimplemented" });
  });
});

describe("the REST gateway decodes a gzip or br body, and refuses others clearly", () => {
  async function rest(
    encoding: string,
    body: Uint8Array,
  ): Promise<{ status: number; json: unknown; requestId: string | null }> {
    const res = await fetch(`${srv.url}/resources/read`, {
      method: "POST",
      headers: { "content-type": "application/json", "content-encoding": encoding },
      body,
    });
    return { status: res.status, json: await res.json(), requestId: res.headers.get("x-request-id") };
  }

  for (const [name, compress] of Object.entries(compressions)) {
    it(`a ${name} body answers as the same body uncompressed`, async () => {
      const a = await rest(name, compress(readJson));
      expect(a.status, JSON.stringify(a.json)).toBe(200);
      // REST's read answers the list of resources itself.
      expect((a.json as { identifier: string }[]).map((r) => r.identifier)).toEqual(ids);
    });
  }

  it("a cut gzip body is MALFORMED_BODY, with a request id", async () => {
    const a = await rest("gzip", cut(readJson));
    expect(a).toMatchObject({
      status: 400,
      json: {
        code: "invalid_argument",
        reason: "MALFORMED_BODY",
        message: "the request body is not valid gzip data (as its content-encoding header says)",
      },
      requestId: expect.any(String),
    });
  });

  it("a body over the limit once decompressed is BODY_TOO_LARGE", async () => {
    const big = Buffer.from(
      JSON.stringify({ identifiers: Array.from({ length: (2 * BODY_LIMIT) / 16 }, () => "x".repeat(12)) }),
    );
    const a = await rest("gzip", gzipSync(big));
    expect(a).toMatchObject({
      status: 413,
      json: {
        code: "resource_exhausted",
        reason: "BODY_TOO_LARGE",
        message: `the request body is larger than ${BODY_LIMIT} bytes once decompressed`,
      },
    });
  });

  it("another content-encoding is 415 UNSUPPORTED_MEDIA_TYPE", async () => {
    const a = await rest("deflate", gzipSync(readJson));
    expect(a).toMatchObject({
      status: 415,
      json: {
        code: "invalid_argument",
        reason: "UNSUPPORTED_MEDIA_TYPE",
        message: 'a REST request body may be sent as gzip, br or uncompressed, got content-encoding "deflate"',
      },
    });
  });
});
