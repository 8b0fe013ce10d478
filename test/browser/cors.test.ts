// CORS over every surface (docs/contract/15-browsers.md): preflights and real requests
// for Connect, gRPC-Web, REST and /events, for a listed origin, an unlisted
// one, "*", and with CORS_ORIGINS unset (no CORS headers at all).
import { cors } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";

const ALLOWED = "http://allowed.example:3000";
const OTHER = "http://other.example";

const surfaces = [
  {
    name: "Connect",
    path: "/resourcestore.v2.SchemaService/Schemas",
    requestHeaders: "content-type,connect-protocol-version,authorization,x-request-id",
  },
  {
    name: "gRPC-Web",
    path: "/resourcestore.v2.SchemaService/Schemas",
    requestHeaders: "content-type,x-grpc-web,x-user-agent,grpc-timeout,authorization",
  },
  { name: "REST", path: "/query/count", requestHeaders: "content-type,authorization,x-request-id" },
  { name: "/events", path: "/events", requestHeaders: "authorization,x-request-id" },
];

function preflight(base: string, path: string, origin: string, requestHeaders: string): Promise<Response> {
  return fetch(base + path, {
    method: "OPTIONS",
    headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": requestHeaders },
  });
}

function listOf(value: string | null): string[] {
  return (value ?? "")
    .split(",")
    .map((s) => s.trim().toLowerCase())
    .filter((s) => s !== "");
}

/** One gRPC-Web frame of an empty message (SchemasRequest has no fields). */
const EMPTY_FRAME = new Uint8Array([0, 0, 0, 0, 0]);

describe("CORS with CORS_ORIGINS naming an origin", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ CORS_ORIGINS: `${ALLOWED}, https://second.example` });
  });
  afterAll(() => server.close());

  for (const s of surfaces) {
    it(`${s.name}: a preflight from a listed origin is 204 with the published lists`, async () => {
      const res = await preflight(server.url, s.path, ALLOWED, s.requestHeaders);
      expect(res.status).toBe(204);
      expect(res.headers.get("access-control-allow-origin")).toBe(ALLOWED);
      const methods = listOf(res.headers.get("access-control-allow-methods"));
      for (const m of cors.allowedMethods) expect(methods).toContain(m.toLowerCase());
      const allowed = listOf(res.headers.get("access-control-allow-headers"));
      for (const h of [...cors.allowedHeaders, "authorization", "x-request-id"])
        expect(allowed).toContain(h.toLowerCase());
      for (const h of s.requestHeaders.split(",")) expect(allowed).toContain(h);
      expect(Number(res.headers.get("access-control-max-age"))).toBeGreaterThan(0);
      expect(listOf(res.headers.get("vary"))).toContain("origin");
    });

    it(`${s.name}: a preflight from an unlisted origin gets no allow-origin`, async () => {
      const res = await preflight(server.url, s.path, OTHER, s.requestHeaders);
      expect(res.headers.get("access-control-allow-origin")).toBeNull();
      expect(res.headers.get("access-control-allow-headers")).toBeNull();
      expect(listOf(res.headers.get("vary"))).toContain("origin");
    });
  }

  it("Connect: the answer carries allow-origin and exposes the published headers plus x-request-id", async () => {
    const res = await fetch(server.url + "/resourcestore.v2.QueryService/Count", {
      method: "POST",
      headers: { origin: ALLOWED, "content-type": "application/json" },
      body: "{}",
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { count?: string }).count ?? "0").toBe("0");
    expect(res.headers.get("access-control-allow-origin")).toBe(ALLOWED);
    const exposed = listOf(res.headers.get("access-control-expose-headers"));
    for (const h of [...cors.exposedHeaders, "x-request-id"]) expect(exposed).toContain(h.toLowerCase());
    expect(listOf(res.headers.get("vary"))).toContain("origin");
  });

  it("gRPC-Web: the answer carries allow-origin and exposes grpc-status", async () => {
    const res = await fetch(server.url + "/resourcestore.v2.SchemaService/Schemas", {
      method: "POST",
      headers: { origin: ALLOWED, "content-type": "application/grpc-web+proto", "x-grpc-web": "1" },
      body: EMPTY_FRAME,
    });
    expect(res.status).toBe(200);
    const body = new Uint8Array(await res.arrayBuffer());
    expect(body.length).toBeGreaterThan(5);
    expect(res.headers.get("access-control-allow-origin")).toBe(ALLOWED);
    expect(listOf(res.headers.get("access-control-expose-headers"))).toEqual(
      expect.arrayContaining(["grpc-status", "grpc-message", "x-request-id"]),
    );
  });

  it("REST: the answer (also an error) carries allow-origin for a listed origin only", async () => {
    const ok = await fetch(server.url + "/schemas", { headers: { origin: "https://second.example" } });
    expect(ok.status).toBe(200);
    expect(ok.headers.get("access-control-allow-origin")).toBe("https://second.example");
    const bad = await fetch(server.url + "/query/count", {
      method: "POST",
      headers: { origin: ALLOWED, "content-type": "application/json" },
      body: '{"nope": 1}',
    });
    expect(bad.status).toBe(400);
    expect(bad.headers.get("access-control-allow-origin")).toBe(ALLOWED);
    const other = await fetch(server.url + "/schemas", { headers: { origin: OTHER } });
    expect(other.status).toBe(200);
    expect(other.headers.get("access-control-allow-origin")).toBeNull();
  });
});

describe("CORS_ORIGINS=*", () => {
  let server: TestServer;
  beforeAll(async () => {
    // "*" needs authentication on (docs/contract/16-limits.md); preflights are answered before credentials.
    server = await startTestServer({ CORS_ORIGINS: "*", API_TOKENS: "cors-star-token=read" });
  });
  afterAll(() => server.close());

  it("allows any origin, echoing it", async () => {
    const res = await preflight(server.url, "/resourcestore.v2.QueryService/Count", OTHER, "content-type");
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe(OTHER);
  });
});

describe("CORS_ORIGINS unset", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(() => server.close());

  it("adds no CORS header anywhere, and a preflight is not answered as one", async () => {
    const pre = await preflight(server.url, "/resourcestore.v2.QueryService/Count", ALLOWED, "content-type");
    expect(pre.status).not.toBe(204);
    const res = await fetch(server.url + "/schemas", { headers: { origin: ALLOWED } });
    for (const res2 of [pre, res]) {
      for (const name of res2.headers.keys()) expect(name.startsWith("access-control-")).toBe(false);
      expect(listOf(res2.headers.get("vary"))).not.toContain("origin");
    }
  });
});
