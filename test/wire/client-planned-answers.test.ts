// The client decodes its unary gRPC and gRPC-Web answers by plan
// (src/client/planned-answers.ts, a Transport around connect's): the very
// same messages as connect's own decoding by reflection, for random answers
// of every unary method of both revisions; the same headers, trailers,
// errors and timeouts; connect's decoding again as soon as the caller gives
// interceptors of its own.
import {
  createServer,
  type Http2Server,
  type IncomingHttpHeaders,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from "node:http2";
import type { AddressInfo } from "node:net";
import { create, toBinary, type DescMethodUnary, type DescService } from "@bufbuild/protobuf";
import { anyPack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import {
  HistoryResponseSchema,
  ReadResponseSchema,
  type ReadResponse,
} from "../../gen/resourcestore/type/v1/resource_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { createResourceStoreClient, createTransport, type TransportKind } from "../../src/client/index.js";
import { decodesByPlan } from "../../src/protobuf/index.js";
import type * as Protobuf from "../../src/protobuf/index.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { envelope } from "../support/envelopes.js";
import { messageArb } from "../protobuf/arbitrary-messages.js";
import { revisions } from "../schema/revisions.js";

// Which answers the plan decoded (the server in this process decodes its requests by plan too: *Request).
const decoded = vi.hoisted(() => [] as string[]);
vi.mock("../../src/protobuf/index.js", async (original) => {
  const m = await original<typeof Protobuf>();
  return {
    ...m,
    plannedFromBinary: (desc: Parameters<typeof m.plannedFromBinary>[0], bytes: Uint8Array) => {
      decoded.push(desc.typeName);
      return m.plannedFromBinary(desc, bytes);
    },
  };
});
const answersDecoded = () => decoded.filter((t) => !t.endsWith("Request"));

/** An interceptor of the caller's that changes nothing: with it, the client leaves answers to connect. */
const passThrough: Interceptor = (next) => (req) => next(req);

/** The client's transport as it was: connect's own decoding (by reflection). */
function reflective(baseUrl: string, transport: TransportKind = "grpc"): Transport {
  return createTransport({ baseUrl, transport, interceptors: [passThrough] });
}

/** What a call ended with: its message, or its error as connect reports it (without the headers that differ from call to call). */
async function outcome(call: Promise<unknown>): Promise<unknown> {
  try {
    return { message: await call };
  } catch (e) {
    if (!(e instanceof ConnectError)) throw e;
    const metadata = [...e.metadata].filter(([k]) => k !== "x-request-id" && k !== "date");
    return { code: e.code, rawMessage: e.rawMessage, details: e.details, metadata };
  }
}

/** Calls method through transport with an empty request. */
function call(
  transport: Transport,
  method: DescMethodUnary,
  options: { timeoutMs?: number; onHeader?: (h: Headers) => void; onTrailer?: (h: Headers) => void } = {},
): Promise<unknown> {
  const client = createClient(method.parent, transport) as unknown as Record<
    string,
    (req: object, o: object) => Promise<unknown>
  >;
  return client[method.localName]!({}, options);
}

describe("against a gRPC server that answers given bytes", () => {
  let server: Http2Server;
  let url: string;
  const sessions = new Set<ServerHttp2Session>();
  let answer: (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void = () => {};
  beforeAll(async () => {
    server = createServer();
    server.on("session", (s) => sessions.add(s));
    server.on("stream", (stream, headers) => {
      stream.on("error", () => {}); // a call the client gave up on (its timeout)
      stream.on("data", () => {});
      stream.on("end", () => answer(stream, headers));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    // The clients keep their sessions open: end them, or close waits for them.
    for (const s of sessions) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  /** One gRPC answer: status 0 and this message, with the given extra headers and trailers. */
  const send =
    (bytes: Uint8Array, extra: { header?: Record<string, string>; trailer?: Record<string, string> } = {}) =>
    (stream: ServerHttp2Stream) => {
      stream.respond(
        { ":status": 200, "content-type": "application/grpc+proto", ...extra.header },
        { waitForTrailers: true },
      );
      stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0", ...extra.trailer }));
      stream.end(envelope(bytes));
    };

  const unary = revisions.flatMap((r) =>
    r.services.flatMap((s: DescService) => s.methods.filter((m): m is DescMethodUnary => m.methodKind === "unary")),
  );
  const planned = unary.filter((m) => decodesByPlan(m.output));

  it("plans most answers; those it cannot plan are connect's", () => {
    expect(planned.length).toBeGreaterThan(unary.length / 2);
    expect(planned.map((m) => m.output)).toContain(ReadResponseSchema);
  });

  it.each(unary.map((m) => [`${m.parent.typeName}.${m.name}`, m] as const))(
    "gives what reflection gives, for random answers: %s",
    async (_name, method) => {
      const ours = createTransport({ baseUrl: url, transport: "grpc" });
      const theirs = reflective(url);
      await fc.assert(
        fc.asyncProperty(messageArb(method.output), async (msg) => {
          answer = send(toBinary(method.output, msg));
          decoded.length = 0;
          const got = await outcome(call(ours, method));
          expect(answersDecoded()).toEqual(decodesByPlan(method.output) ? [method.output.typeName] : []);
          expect(got).toStrictEqual(await outcome(call(theirs, method)));
        }),
        { numRuns: 15 },
      );
    },
  );

  it("fails where reflection fails, and answers only what reflection answers, for damaged answers", async () => {
    const ours = createTransport({ baseUrl: url, transport: "grpc" });
    const theirs = reflective(url);
    const read = ResourceService.method.read;
    // A byte changed or the message cut short. Damaged input is not always
    // read alike: the plan's transport first walks the answer's top-level
    // fields by their wire types, where reflection reads a known field by
    // its declared kind. So a damaged answer may fail with another reason,
    // or fail where reflection happened to read something; never the reverse.
    await fc.assert(
      fc.asyncProperty(
        messageArb(ReadResponseSchema),
        fc.nat(),
        fc.nat(255),
        fc.boolean(),
        async (msg, at, byte, cut) => {
          const bytes = toBinary(ReadResponseSchema, msg as ReadResponse);
          if (bytes.length === 0) return;
          const i = at % bytes.length;
          const damaged = cut ? bytes.subarray(0, i) : bytes.map((b, k) => (k === i ? byte : b));
          answer = send(damaged);
          const got = (await outcome(call(ours, read))) as { message?: unknown; code?: Code; rawMessage?: string };
          const want = (await outcome(call(theirs, read))) as typeof got;
          if (got.message !== undefined) expect(got).toStrictEqual(want);
          else {
            expect(got).toMatchObject({
              code: Code.Internal,
              rawMessage: expect.stringMatching(/^parse binary: /) as unknown,
            });
            if (want.message === undefined) expect(want.code).toBe(Code.Internal);
            // For the same reason, the same error (no metadata, no details).
            if (want.rawMessage === got.rawMessage) expect(got).toStrictEqual(want);
          }
        },
      ),
      { numRuns: 150 },
    );
  });

  it("hands the caller the answer's headers and trailers", async () => {
    const read = ResourceService.method.read;
    const bytes = toBinary(ReadResponseSchema, create(ReadResponseSchema, { resources: [{ identifier: "h-1" }] }));
    answer = send(bytes, {
      header: { "x-answer": "head" },
      trailer: { "x-answer-trailer": "tail", "x-answer-bin": Buffer.from([1, 2, 3]).toString("base64") },
    });
    const seen = async (transport: Transport) => {
      const out: Record<string, string> = {};
      await call(transport, read, {
        onHeader: (h) => void (out.header = h.get("x-answer") ?? ""),
        onTrailer: (h) => {
          out.trailer = h.get("x-answer-trailer") ?? "";
          out.bin = h.get("x-answer-bin") ?? "";
        },
      });
      return out;
    };
    const ours = await seen(createTransport({ baseUrl: url, transport: "grpc" }));
    expect(ours).toEqual({ header: "head", trailer: "tail", bin: "AQID" });
    expect(ours).toEqual(await seen(reflective(url)));
  });

  it("reports an error status, its message, details and metadata as connect does", async () => {
    const status = create(StatusSchema, {
      code: Code.NotFound,
      message: "resource e-1 is missing",
      details: [
        anyPack(
          ErrorInfoSchema,
          create(ErrorInfoSchema, { reason: "NOT_FOUND", domain: "test", metadata: { identifier: "e-1" } }),
        ),
      ],
    });
    answer = (stream) =>
      // Trailers-only, as a gRPC server answers an error.
      stream.respond(
        {
          ":status": 200,
          "content-type": "application/grpc+proto",
          "grpc-status": String(status.code),
          "grpc-message": encodeURIComponent(status.message),
          "grpc-status-details-bin": Buffer.from(toBinary(StatusSchema, status)).toString("base64"),
          "x-why": "because",
        },
        { endStream: true },
      );
    const read = ResourceService.method.read;
    const ours = (await outcome(call(createTransport({ baseUrl: url, transport: "grpc" }), read))) as {
      code: Code;
      details: unknown[];
      metadata: unknown[];
    };
    expect(ours).toMatchObject({ code: Code.NotFound, rawMessage: "resource e-1 is missing" });
    expect(ours.details).toHaveLength(1);
    expect(ours.metadata).toContainEqual(["x-why", "because"]);
    expect(ours).toStrictEqual(await outcome(call(reflective(url), read)));
  });

  it("times out as connect does", async () => {
    answer = () => {}; // never answers
    const read = ResourceService.method.read;
    const ours = await outcome(call(createTransport({ baseUrl: url, transport: "grpc" }), read, { timeoutMs: 50 }));
    expect(ours).toMatchObject({ code: Code.DeadlineExceeded });
    expect(ours).toStrictEqual(await outcome(call(reflective(url), read, { timeoutMs: 50 })));
  });
});

describe("against the service", () => {
  let srv: TestServer;
  beforeAll(async () => {
    srv = await startTestServer();
    const client = createResourceStoreClient({ baseUrl: srv.url, transport: "grpc" });
    await client.resources.create({
      resources: ["pa-1", "pa-2"].map((identifier) => ({
        identifier,
        payload: { case: "study", value: { modality: "CT", description: "é ✓ \u{1F600}" } },
      })),
    });
    for (let v = 0; v < 3; v++) await client.resources.update({ updates: { "pa-1": { license: `L-${v}` } } });
  });
  afterAll(async () => {
    await srv?.close();
  });

  it.each<TransportKind>(["grpc", "grpc-web"])(
    "decodes reads and history pages by plan over %s, into the messages reflection gives",
    async (transport) => {
      const client = createResourceStoreClient({ baseUrl: srv.url, transport });
      const other = createClient(ResourceService, reflective(srv.url, transport));
      decoded.length = 0;
      const read = await client.resources.read({ identifiers: ["pa-1", "pa-2"] });
      const page = await client.resources.history({ identifier: "pa-1", limit: 2 });
      expect(answersDecoded()).toEqual([ReadResponseSchema.typeName, HistoryResponseSchema.typeName]);
      expect(read.resources.map((r) => r.identifier)).toEqual(["pa-1", "pa-2"]);
      expect(read).toStrictEqual(await other.read({ identifiers: ["pa-1", "pa-2"] }));
      expect(page.versions).toHaveLength(2);
      expect(page).toStrictEqual(await other.history({ identifier: "pa-1", limit: 2 }));
    },
  );

  it("leaves answers to connect when the caller gives interceptors, which see the real messages", async () => {
    const seen: string[] = [];
    const client = createResourceStoreClient({
      baseUrl: srv.url,
      transport: "grpc",
      interceptors: [
        (next) => async (req) => {
          const res = await next(req);
          if (!res.stream) seen.push(res.message.$typeName);
          return res;
        },
      ],
    });
    decoded.length = 0;
    const read = await client.resources.read({ identifiers: ["pa-2"] });
    expect(read.resources[0]?.identifier).toBe("pa-2");
    expect(seen).toEqual([ReadResponseSchema.typeName]);
    expect(answersDecoded()).toEqual([]);
  });

  it("answers the service's errors as connect's decoding does", async () => {
    const client = createResourceStoreClient({ baseUrl: srv.url, transport: "grpc" });
    const ours = (await outcome(client.resources.history({ identifier: "pa-none" }))) as { code?: Code };
    expect(ours.code).toBe(Code.NotFound);
    expect(ours).toStrictEqual(
      await outcome(createClient(ResourceService, reflective(srv.url)).history({ identifier: "pa-none" })),
    );
  });
});
