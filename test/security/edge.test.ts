// The edge of docs/contract/16-limits.md, round three, against the service as
// `npm start` builds it:
// - with authentication off only the loopback names and ALLOWED_HOSTS are
//   answered (DNS rebinding): any other Host (HTTP/2 :authority) is 421 over
//   REST, Connect, gRPC, the open paths and the explorer, before anything
//   runs; with authentication on Host is checked only when ALLOWED_HOSTS is set;
// - CORS_ORIGINS=* with authentication off fails start-up naming CORS_ORIGINS;
// - every surface (REST, Connect, gRPC, gRPC-Web, reflection v1 and v1alpha,
//   /events, paths no route knows) answers 401 to a request without
//   credentials before its body is sent; the open paths stay open.
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../../src/app.js";
import { ConfigError, loadConfig } from "../../src/config.js";
import { createLogger } from "../../src/log.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { startMain } from "../support/main-process.js";
import { storeFingerprint } from "./fingerprint.js";

const TOKEN = "edge-token-1";
/** Every answer below is expected long before this; a request left waiting fails instead of hanging. */
const ANSWER_MS = 5000;

let open: TestServer;
let locked: TestServer;
let lockedHosts: TestServer;

beforeAll(async () => {
  [open, locked, lockedHosts] = await Promise.all([
    startTestServer({ ALLOWED_HOSTS: "api.example.org, 10.0.0.5:8080" }),
    startTestServer({ API_TOKENS: `${TOKEN}=admin` }),
    startTestServer({ API_TOKENS: `${TOKEN}=admin`, ALLOWED_HOSTS: "api.example.org" }),
  ]);
}, 60_000);
afterAll(async () => {
  await Promise.all([open?.close(), locked?.close(), lockedHosts?.close()]);
});

interface Answer {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly text: string;
}

/** An HTTP/1.1 request with the Host given (the path as written). */
function h1(
  port: number,
  host: string,
  method: string,
  path: string,
  body?: string,
  headers: Record<string, string> = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: "127.0.0.1", port, method, path, setHost: false, headers: { host, ...headers }, timeout: ANSWER_MS },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => (text += d));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
      },
    );
    req.on("timeout", () => req.destroy(new Error("no answer in time")));
    req.on("error", reject);
    req.end(body);
  });
}

/** An HTTP/2 request with the :authority given; resolves the response headers (and body), the request body never sent when `body` is undefined. */
function h2(
  port: number,
  authority: string,
  headers: http2.OutgoingHttpHeaders,
  body?: string,
): Promise<{ headers: http2.IncomingHttpHeaders; text: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", () => undefined);
    const timer = setTimeout(() => {
      session.destroy();
      reject(new Error("no answer in time"));
    }, ANSWER_MS);
    const stream = session.request({ ":method": "POST", ":authority": authority, ...headers });
    stream.on("error", () => undefined);
    let got: http2.IncomingHttpHeaders | undefined;
    let text = "";
    stream.setEncoding("utf8");
    stream.on("response", (h) => (got = h));
    stream.on("data", (d: string) => (text += d));
    const done = (): void => {
      clearTimeout(timer);
      session.destroy();
      if (got === undefined) reject(new Error(`stream closed without an answer (rst ${stream.rstCode ?? "?"})`));
      else resolve({ headers: got, text });
    };
    stream.on("close", done);
    // An answer without waiting for the body: resolve on the headers when nothing more will come.
    stream.on("response", (h) => {
      if (body === undefined && h["grpc-status"] !== undefined) done();
    });
    if (body !== undefined) stream.end(body);
  });
}

function reasonOf(text: string): unknown {
  const j = JSON.parse(text) as { reason?: string; details?: { debug?: { reason?: string } }[] };
  return j.reason ?? j.details?.[0]?.debug?.reason;
}

describe("Host with authentication off (DNS rebinding)", () => {
  it.each([
    "127.0.0.1",
    "localhost",
    "LOCALHOST:8080",
    "[::1]:1234",
    "api.example.org",
    "api.example.org:443",
    "10.0.0.5:8080",
  ])("Host %s is answered", async (host) => {
    const res = await h1(open.port, host, "GET", "/healthz");
    expect(res.status).toBe(200);
  });

  it.each([
    "evil.example",
    "127.0.0.1.evil.example",
    "localhost.evil.example:8080",
    "10.0.0.5:9090",
    "[::2]",
    "api.example.org.evil",
  ])("Host %s is 421 on every surface, nothing runs", async (host) => {
    const before = await storeFingerprint(open.app.db);
    for (const [method, path, body, headers] of [
      ["GET", "/healthz", undefined, {}],
      ["GET", "/openapi.json", undefined, {}],
      ["GET", "/ui/", undefined, {}],
      ["GET", "/events", undefined, {}],
      [
        "POST",
        "/resources/create",
        JSON.stringify({ resources: [{ identifier: "rebound", payload_type: "annotation", label: "x" }] }),
        { "content-type": "application/json" },
      ],
      [
        "POST",
        "/resourcestore.v2.ResourceService/Create",
        JSON.stringify({ resources: [{ identifier: "rebound", payload_type: "annotation", label: "x" }] }),
        { "content-type": "application/json" },
      ],
      [
        "OPTIONS",
        "/resources/create",
        undefined,
        { origin: "http://evil.example", "access-control-request-method": "POST" },
      ],
    ] as const) {
      const res = await h1(open.port, host, method, path, body, headers);
      expect([path, res.status, res.headers["content-type"]]).toEqual([path, 421, "application/json"]);
      expect(reasonOf(res.text)).toBe("MISDIRECTED_REQUEST");
      expect(res.headers["access-control-allow-origin"]).toBeUndefined();
    }
    expect(await storeFingerprint(open.app.db)).toBe(before);
  });

  it("HTTP/2 uses :authority: REST 421, gRPC refused (permission_denied, MISDIRECTED_REQUEST) before its body", async () => {
    const rest = await h2(
      open.port,
      "evil.example",
      { ":path": "/resources/read", "content-type": "application/json" },
      JSON.stringify({ identifiers: [] }),
    );
    expect(rest.headers[":status"]).toBe(421);
    expect(reasonOf(rest.text)).toBe("MISDIRECTED_REQUEST");
    // No body is sent: the refusal must not wait for one.
    const grpc = await h2(open.port, "evil.example:80", {
      ":path": "/resourcestore.v2.ResourceService/Create",
      "content-type": "application/grpc",
      te: "trailers",
    });
    expect([grpc.headers["grpc-status"], grpc.headers["grpc-message"]]).toEqual([
      "7",
      expect.stringContaining("ALLOWED_HOSTS"),
    ]);
    expect(Buffer.from(String(grpc.headers["grpc-status-details-bin"]), "base64").toString("latin1")).toContain(
      "MISDIRECTED_REQUEST",
    );
    const local = await h2(
      open.port,
      "127.0.0.1",
      { ":path": "/resources/read", "content-type": "application/json" },
      JSON.stringify({ identifiers: [] }),
    );
    expect(local.headers[":status"]).toBe(200);
  });

  it("with authentication on Host is not checked, unless ALLOWED_HOSTS is set", async () => {
    const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
    const read = JSON.stringify({ identifiers: [] });
    expect((await h1(locked.port, "evil.example", "POST", "/resources/read", read, auth)).status).toBe(200);
    expect((await h1(lockedHosts.port, "api.example.org:8443", "POST", "/resources/read", read, auth)).status).toBe(
      200,
    );
    const refused = await h1(lockedHosts.port, "evil.example", "POST", "/resources/read", read, auth);
    expect([refused.status, reasonOf(refused.text)]).toEqual([421, "MISDIRECTED_REQUEST"]);
    // Only the listed names: loopback is not implied once authentication is on.
    expect((await h1(lockedHosts.port, "127.0.0.1", "GET", "/healthz")).status).toBe(421);
  });
});

describe("ALLOWED_HOSTS and CORS_ORIGINS at start-up", () => {
  it("ALLOWED_HOSTS is read as names with optional ports and refuses anything else, naming itself", () => {
    expect(loadConfig({ ALLOWED_HOSTS: "API.example.org, 10.0.0.5:8080,[fd00::1]" }).allowedHosts).toEqual([
      "api.example.org",
      "10.0.0.5:8080",
      "[fd00::1]",
    ]);
    expect(loadConfig({}).allowedHosts).toBeUndefined();
    for (const bad of ["*", "http://x.org", "x.org/path", " , ", "a..b"]) {
      expect(() => loadConfig({ ALLOWED_HOSTS: bad })).toThrow(ConfigError);
      expect(() => loadConfig({ ALLOWED_HOSTS: bad })).toThrow(/ALLOWED_HOSTS/);
    }
  });

  it("CORS_ORIGINS=* with authentication off fails createApp with a ConfigError naming CORS_ORIGINS", async () => {
    const config = loadConfig({ CORS_ORIGINS: "*", DATA_DIR: "/nonexistent-never-opened" });
    const err = await createApp(config, createLogger("silent")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(/CORS_ORIGINS is "\*", but authentication is off/);
  });

  it("npm start with CORS_ORIGINS=* and no tokens exits 2 naming CORS_ORIGINS; with tokens it starts", async () => {
    const refused = startMain({ CORS_ORIGINS: "*", DATA_DIR: "/nonexistent-never-opened" });
    expect(await refused.exited).toBe(2);
    expect(refused.lines.join("\n")).toMatch(/CORS_ORIGINS/);
    const started = startMain({
      CORS_ORIGINS: "*",
      API_TOKENS: `${TOKEN}=admin`,
      DATA_DIR: "/nonexistent-never-opened",
      DATABASE_URL: "postgres://127.0.0.1:1/none",
    });
    // Past the configuration checks: it fails later, on the database it cannot reach, not on CORS_ORIGINS.
    expect(await started.exited).not.toBe(2);
    expect(started.lines.join("\n")).not.toMatch(/CORS_ORIGINS/);
  }, 60_000);
});

/** Sends only the request head announcing a 60 MiB body; resolves the response head, or "no answer" when the server waits for the body. */
function headOnly(port: number, method: string, path: string, headers: Record<string, string>): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1", () => {
      const lines = Object.entries({ host: "127.0.0.1", "content-length": String(60 * 1024 * 1024), ...headers }).map(
        ([k, v]) => `${k}: ${v}`,
      );
      socket.write(`${method} ${path} HTTP/1.1\r\n${lines.join("\r\n")}\r\n\r\n`);
    });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve("no answer");
    }, ANSWER_MS);
    let got = "";
    socket.on("data", (d: Buffer) => {
      got += d.toString("latin1");
      if (got.includes("\r\n\r\n")) {
        clearTimeout(timer);
        socket.destroy();
        resolve(got);
      }
    });
    socket.on("error", () => undefined);
  });
}

describe("every surface is authenticated before its body (authentication on)", () => {
  it.each([
    ["REST", "POST", "/resources/create", "application/json"],
    ["Connect", "POST", "/resourcestore.v2.ResourceService/Create", "application/json"],
    ["gRPC-Web", "POST", "/resourcestore.v2.ResourceService/Create", "application/grpc-web+proto"],
    [
      "reflection v1 (gRPC-Web)",
      "POST",
      "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
      "application/grpc-web+proto",
    ],
    [
      "reflection v1alpha (gRPC-Web)",
      "POST",
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      "application/grpc-web+proto",
    ],
    ["/events with a body", "GET", "/events", "application/json"],
    ["a path no route knows", "POST", "/no/such/path", "application/json"],
    ["an open path with a body", "POST", "/healthz", "application/json"],
  ])("%s: answered before the body is sent", async (_name, method, path, type) => {
    const line = await headOnly(locked.port, method, path, { "content-type": type });
    // gRPC-Web answers in its protocol (HTTP 200, grpc-status in headers); the others 401.
    if (type.startsWith("application/grpc")) expect(line).toMatch(/^HTTP\/1\.1 200 [^]*\r\ngrpc-status: 16\r\n/i);
    else expect(line).toMatch(/^HTTP\/1\.1 401 /);
  });

  it.each([
    ["reflection v1", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"],
    ["reflection v1alpha", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"],
    ["a unary call", "/resourcestore.v2.ResourceService/Create"],
  ])("gRPC %s over HTTP/2: unauthenticated before a byte of the request is sent", async (_name, path) => {
    const res = await h2(locked.port, "127.0.0.1", {
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
    });
    expect(res.headers["grpc-status"]).toBe("16");
  });

  it("GET /events without credentials is 401 (no stream opens)", async () => {
    const res = await h1(locked.port, "127.0.0.1", "GET", "/events");
    expect([res.status, reasonOf(res.text)]).toEqual([401, "UNAUTHENTICATED"]);
  });

  it("the open paths stay open; everything else needs credentials, unknown paths included", async () => {
    for (const path of ["/healthz", "/readyz", "/metrics", "/openapi.json"]) {
      expect([path, (await h1(locked.port, "127.0.0.1", "GET", path)).status]).toEqual([path, 200]);
    }
    // The explorer's files: 200 once `npm run build` made them, 404 before; never 401.
    for (const path of ["/ui/", "/ui/main.js"])
      expect([path, (await h1(locked.port, "127.0.0.1", "GET", path)).status]).toEqual([
        path,
        expect.toBeOneOf([200, 404]),
      ]);
    expect((await h1(locked.port, "127.0.0.1", "GET", "/")).status).toBe(302);
    const unknown = await h1(locked.port, "127.0.0.1", "GET", "/no/such/path");
    expect([unknown.status, reasonOf(unknown.text)]).toEqual([401, "UNAUTHENTICATED"]);
    const withToken = await h1(locked.port, "127.0.0.1", "GET", "/no/such/path", undefined, {
      authorization: `Bearer ${TOKEN}`,
    });
    expect(withToken.status).toBe(404);
  });
});
