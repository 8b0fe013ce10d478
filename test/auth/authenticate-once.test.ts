// One authentication a call (docs/architecture.md, "One call's way"): the
// front door checks the credentials before any body is read and hands the
// principal it found to the call (src/http/arrival.ts); the auth
// interceptor then checks the method's scope against it without
// authenticating again. With OIDC each authentication is a JWT
// verification, so a second one doubled the cost of every call. Counted
// here with an authenticator that counts, on every way in: REST (unary
// through the lane, a cached constant document, a stream through the
// in-process transport), Connect JSON and binary, plain gRPC (the lane),
// gRPC with a deadline and gRPC-Web (connect's router), and a gRPC Watch
// (the feed lane). A call its scope refuses and a token the door refuses
// are authenticated once too. The request id is chosen once as well: a
// request refused at the door answers with it, and its log line names it.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { WatchRequestSchema } from "../../gen/resourcestore/type/v1/event_pb.js";
import type { Authenticator, Principal } from "../../src/auth/index.js";
import { unauthenticated } from "../../src/errors.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { logLines, type LogLines } from "../support/log-lines.js";

const WRITER = "tok-writer";
const READER = "tok-reader";

const principals: Record<string, Principal> = {
  [`Bearer ${WRITER}`]: {
    id: "writer",
    actor: "writer",
    scopes: new Set(["read", "write"]),
    grants: { datasources: "all", clearance: "restricted" },
  },
  [`Bearer ${READER}`]: {
    id: "reader",
    actor: "reader",
    scopes: new Set(["read"]),
    grants: { datasources: "all", clearance: "restricted" },
  },
};

let authentications = 0;
const counting: Authenticator = {
  enabled: true,
  authenticate(authorization) {
    authentications += 1;
    const p = authorization === null ? undefined : principals[authorization];
    return p === undefined ? Promise.reject(unauthenticated("not a token of this test")) : Promise.resolve(p);
  },
};

let srv: TestServer;
let log: LogLines;

beforeAll(async () => {
  log = logLines("info");
  srv = await startTestServer({}, { auth: counting }, log.logger);
  const res = await fetch(`${srv.url}/resources/create`, {
    method: "POST",
    headers: { authorization: `Bearer ${WRITER}`, "content-type": "application/json" },
    body: JSON.stringify({ resources: [{ identifier: "ds", payload_type: "datasource", name: "D" }] }),
  });
  expect(res.status, await res.text()).toBe(200);
}, 60_000);
afterAll(async () => {
  await srv?.close();
});
beforeEach(() => {
  authentications = 0;
});

const headers = (token: string) => ({ authorization: `Bearer ${token}`, "content-type": "application/json" });

function transportOf(kind: "connect-json" | "connect-binary" | "grpc" | "grpc-web"): Transport {
  if (kind === "grpc") return createGrpcTransport({ baseUrl: srv.url });
  if (kind === "grpc-web") return createGrpcWebTransport({ baseUrl: srv.url, httpVersion: "1.1" });
  return createConnectTransport({ baseUrl: srv.url, httpVersion: "1.1", useBinaryFormat: kind === "connect-binary" });
}

describe("one authentication a call", () => {
  it("REST: a unary call, a constant document (first and cached) and a stream", async () => {
    const read = await fetch(`${srv.url}/resources/read`, {
      method: "POST",
      headers: headers(READER),
      body: JSON.stringify({ identifiers: ["ds"] }),
    });
    expect(read.status).toBe(200);
    expect(authentications).toBe(1);
    for (const round of [1, 2]) {
      authentications = 0;
      const schemas = await fetch(`${srv.url}/schemas`, { headers: headers(READER) });
      expect(schemas.status, `round ${round}`).toBe(200);
      await schemas.arrayBuffer();
      expect(authentications, `/schemas, round ${round}`).toBe(1);
    }
    authentications = 0;
    const parquet = await fetch(`${srv.url}/query/parquet`, {
      method: "POST",
      headers: headers(READER),
      body: "{}",
    });
    expect(parquet.status, await parquet.clone().text()).toBe(200);
    await parquet.arrayBuffer();
    expect(authentications).toBe(1);
  });

  for (const kind of ["connect-json", "connect-binary", "grpc", "grpc-web"] as const) {
    it(`${kind}: a call, and a call with a deadline`, async () => {
      const client = createClient(ResourceService, transportOf(kind));
      const h = { authorization: `Bearer ${READER}` };
      const res = await client.read({ identifiers: ["ds"] }, { headers: h });
      expect(res.resources.map((r) => r.identifier)).toEqual(["ds"]);
      expect(authentications).toBe(1);
      authentications = 0;
      await client.read({ identifiers: ["ds"] }, { headers: h, timeoutMs: 30_000 });
      expect(authentications).toBe(1);
    });
  }

  it("a gRPC Watch (the feed lane) and a gRPC-Web one (connect's router)", async () => {
    for (const kind of ["grpc", "grpc-web"] as const) {
      authentications = 0;
      const client = createClient(EventService, transportOf(kind));
      const abort = new AbortController();
      const stream = client.watch(create(WatchRequestSchema, {}), {
        headers: { authorization: `Bearer ${READER}` },
        signal: abort.signal,
      });
      // The first message (the feed's position) says the call has passed the interceptors.
      const first = await stream[Symbol.asyncIterator]().next();
      expect(first.done, kind).toBe(false);
      abort.abort();
      expect(authentications, kind).toBe(1);
    }
  });

  it("a call its scope refuses, and a token the door refuses", async () => {
    const client = createClient(ResourceService, transportOf("grpc"));
    const refused = await client.create({ resources: [] }, { headers: { authorization: `Bearer ${READER}` } }).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(refused?.code).toBe(Code.PermissionDenied);
    expect(authentications).toBe(1);
    authentications = 0;
    const res = await fetch(`${srv.url}/resources/read`, {
      method: "POST",
      headers: headers("nobody"),
      body: JSON.stringify({ identifiers: ["ds"] }),
    });
    expect(res.status).toBe(401);
    expect(authentications).toBe(1);
  });
});

describe("one request id a request", () => {
  it("a request refused at the door answers with its request id, and its log line names the same", async () => {
    const res = await fetch(`${srv.url}/resources/read`, {
      method: "POST",
      headers: headers("nobody"),
      body: JSON.stringify({ identifiers: ["ds"] }),
    });
    expect(res.status).toBe(401);
    const id = res.headers.get("x-request-id");
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    const line = log.records().find((l) => l.request_id === id);
    expect(line, JSON.stringify(log.records().slice(-3))).toMatchObject({ path: "/resources/read", status: 401 });
    // A safe id the client sent is the one answered and logged.
    const mine = await fetch(`${srv.url}/resources/read`, {
      method: "POST",
      headers: { ...headers("nobody"), "x-request-id": "client-id-1" },
      body: "{}",
    });
    expect(mine.headers.get("x-request-id")).toBe("client-id-1");
    expect(log.records().some((l) => l.request_id === "client-id-1" && l.status === 401)).toBe(true);
  });
});
