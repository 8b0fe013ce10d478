// docs/contract/15-browsers.md and docs/contract/16-limits.md at the door: paths are matched as sent (dot
// segments, also percent-encoded, and backslashes are 404: the v1 path below
// must not reach v2 Restore); a REST body that is not application/json is 415
// invalid_argument and nothing runs; with tokens configured, a call without
// valid credentials is 401 after its headers alone, over REST, Connect and
// gRPC, and the service goes on serving.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";
import { callRest } from "./calls.js";
import { storeFingerprint } from "./fingerprint.js";

const TOKEN = "door-token-1";
let open: TestServer;
let locked: TestServer;

beforeAll(async () => {
  [open, locked] = await Promise.all([startTestServer(), startTestServer({ API_TOKENS: `${TOKEN}=admin` })]);
  const made = await callRest(open.url, "POST", "/resources/create", {
    body: JSON.stringify({ resources: [{ identifier: "gone", payload_type: "annotation", label: "x" }] }),
  });
  expect(made.status).toBe(200);
  expect(
    (await callRest(open.url, "POST", "/resources/delete", { body: JSON.stringify({ identifiers: ["gone"] }) })).status,
  ).toBe(200);
});
afterAll(async () => {
  await Promise.all([open?.close(), locked?.close()]);
});

/** A raw request: the path goes on the wire exactly as written here. */
function raw(
  port: number,
  method: string,
  path: string,
  body: string | undefined,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: unknown }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: "127.0.0.1",
        port,
        method,
        path,
        headers: { ...headers, ...(body !== undefined ? { "content-length": Buffer.byteLength(body) } : {}) },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => (text += d));
        res.on("end", () => {
          let json: unknown;
          try {
            json = JSON.parse(text);
          } catch {
            json = text;
          }
          resolve({ status: res.statusCode ?? 0, json });
        });
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

describe("paths are matched as sent", () => {
  const restore = JSON.stringify({ identifiers: ["gone"] });
  it.each([
    "/v1/%2e%2e/resources/restore",
    "/v1/%2E%2e/resources/restore",
    "/v1/../resources/restore",
    "/v1/./resources/restore",
    "/v2/resources/%2e/restore",
    "/v1\\resources\\restore",
    "/v1/resources%5crestore",
    "/resources/restore/..",
  ])("POST %s is 404 and restores nothing", async (path) => {
    const before = await storeFingerprint(open.app.db);
    const res = await raw(open.port, "POST", path, restore, { "content-type": "application/json" });
    expect([res.status, (res.json as { code?: string }).code]).toEqual([404, "not_found"]);
    expect(await storeFingerprint(open.app.db)).toBe(before);
  });

  it("the same call on its real path is served", async () => {
    const res = await raw(open.port, "POST", "/v1/resources/read", JSON.stringify({ identifiers: ["gone"] }), {
      "content-type": "application/json",
    });
    expect(res.status).toBe(200);
  });
});

describe("REST bodies must be application/json (section 15)", () => {
  const body = JSON.stringify({ resources: [{ identifier: "plain", payload_type: "annotation", label: "x" }] });
  it.each([
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/jsonx",
    "",
  ])("content type %j is 415 invalid_argument and writes nothing", async (type) => {
    const before = await storeFingerprint(open.app.db);
    const res = await raw(open.port, "POST", "/resources/create", body, type === "" ? {} : { "content-type": type });
    expect([res.status, (res.json as { code?: string }).code]).toEqual([415, "invalid_argument"]);
    expect(await storeFingerprint(open.app.db)).toBe(before);
  });

  it("application/json with a charset is served", async () => {
    const res = await raw(open.port, "POST", "/resources/create", body, {
      "content-type": "application/json; charset=utf-8",
    });
    expect([res.status, res.json]).toEqual([200, { created: 1 }]);
  });
});

/** Sends only the request head of a 60 MiB body and resolves the first response line and headers. */
function headOnly(port: number, path: string, headers: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => {
      const lines = Object.entries({ host: "x", "content-length": String(60 * 1024 * 1024), ...headers }).map(
        ([k, v]) => `${k}: ${v}`,
      );
      socket.write(`POST ${path} HTTP/1.1\r\n${lines.join("\r\n")}\r\n\r\n`);
    });
    let got = "";
    socket.on("data", (d: Buffer) => {
      got += d.toString("latin1");
      if (got.includes("\r\n\r\n")) {
        socket.destroy();
        resolve(got);
      }
    });
    socket.on("error", reject);
  });
}

describe("credentials before the body", () => {
  it("REST and Connect without a token: 401 before a byte of the 60 MiB body is sent", async () => {
    const rest = await headOnly(locked.port, "/resources/create", { "content-type": "application/json" });
    expect(rest).toMatch(/^HTTP\/1\.1 401 /);
    const connect = await headOnly(locked.port, "/resourcestore.v2.ResourceService/Create", {
      "content-type": "application/json",
    });
    expect(connect).toMatch(/^HTTP\/1\.1 401 /);
    const badToken = await headOnly(locked.port, "/resources/create", {
      "content-type": "application/json",
      authorization: "Bearer nope",
    });
    expect(badToken).toMatch(/^HTTP\/1\.1 401 /);
  });

  it("gRPC without a token: unauthenticated in the response headers, the stream ended", async () => {
    const session = http2.connect(locked.url);
    session.on("error", () => undefined);
    const stream = session.request({
      ":method": "POST",
      ":path": "/resourcestore.v2.ResourceService/Create",
      "content-type": "application/grpc",
      te: "trailers",
    });
    stream.on("error", () => undefined);
    // The body never comes: the answer must not wait for it.
    const headers = await new Promise<http2.IncomingHttpHeaders>((resolve) => stream.on("response", resolve));
    expect(headers["grpc-status"]).toBe("16");
    session.destroy();
  });

  it("a path the route table cannot decode (bad percent escape) is a 400 answer, not a thrown handler", async () => {
    const res = await raw(locked.port, "GET", "/v2/parents/%zz", undefined);
    expect(res.status).toBe(400);
    expect(res.json).toMatchObject({ code: "invalid_argument" });
    // The server goes on serving.
    expect((await fetch(`${locked.url}/healthz`)).status).toBe(200);
  });

  it("with a token the same calls are served; open paths stay open", async () => {
    const res = await callRest(locked.url, "POST", "/resources/read", {
      body: JSON.stringify({ identifiers: [] }),
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(res.status).toBe(200);
    expect((await fetch(`${locked.url}/healthz`)).status).toBe(200);
  });
});

describe("a 60 MiB body without credentials costs the server near nothing", () => {
  it("over REST, Connect and gRPC: 401, the server process's CPU and memory barely move", async () => {
    const root = join(import.meta.dirname, "../..");
    const dataDir = await mkdtemp(join(tmpdir(), "rs-door-"));
    // One process (no tsx wrapper) so its /proc figures are the server's.
    const proc = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
      cwd: root,
      env: {
        PATH: process.env.PATH ?? "",
        DATA_DIR: dataDir,
        PORT: "0",
        LOG_LEVEL: "info",
        API_TOKENS: `${TOKEN}=admin`,
      },
      stdio: ["ignore", "pipe", "inherit"],
    });
    try {
      const port = await new Promise<number>((resolve, reject) => {
        let buf = "";
        proc.stdout.on("data", (d: Buffer) => {
          buf += d.toString();
          const m = /"port":(\d+)[^\n]*"msg":"listening"|"msg":"listening"[^\n]*"port":(\d+)/.exec(buf);
          if (m) resolve(Number(m[1] ?? m[2]));
        });
        proc.once("exit", () => reject(new Error("server exited")));
      });
      const pid = proc.pid as number;
      const usage = () => {
        const stat = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
        const ticks = Number(stat[11]) + Number(stat[12]); // utime + stime
        const rssKb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]);
        const hwmKb = Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]);
        return { ticks, rssKb, hwmKb };
      };
      // Warm up the paths once (module loading, JIT) with an empty call.
      await headOnly(port, "/resources/create", { "content-type": "application/json" });
      await new Promise((r) => setTimeout(r, 500));
      const before = usage();
      const body = Buffer.alloc(60 * 1024 * 1024, 0x20);
      const sendAll = (path: string, type: string) =>
        new Promise<{ status: string; written: number }>((resolve) => {
          const socket = net.connect(port, "127.0.0.1");
          let got = "";
          let written = 0;
          socket.on("connect", () => {
            socket.write(
              `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: ${type}\r\ncontent-length: ${body.length}\r\n\r\n`,
            );
            const pump = () => {
              while (written < body.length && !socket.destroyed) {
                const part = body.subarray(written, written + 65536);
                written += part.length;
                if (!socket.write(part)) return void socket.once("drain", pump);
              }
            };
            pump();
          });
          socket.on("data", (d: Buffer) => (got += d.toString("latin1")));
          socket.on("error", () => undefined);
          socket.on("close", () => resolve({ status: got.split("\r\n")[0] ?? "", written }));
        });
      const rest = await sendAll("/resources/create", "application/json");
      const connect = await sendAll("/resourcestore.v2.ResourceService/Create", "application/json");
      const grpc = await new Promise<string>((resolve) => {
        const session = http2.connect(`http://127.0.0.1:${port}`);
        session.on("error", () => undefined);
        const stream = session.request({
          ":method": "POST",
          ":path": "/resourcestore.v2.ResourceService/Create",
          "content-type": "application/grpc",
          te: "trailers",
        });
        stream.on("error", () => undefined);
        stream.on("response", (h) => {
          resolve(String(h["grpc-status"]));
          session.destroy();
        });
        stream.on("close", () => resolve(`closed ${stream.rstCode ?? ""}`));
        stream.write(body.subarray(0, 8 * 1024 * 1024));
      });
      const after = usage();
      expect(rest.status).toMatch(/ 401 /);
      expect(connect.status).toMatch(/ 401 /);
      expect(grpc).toBe("16");
      const cpuMs = ((after.ticks - before.ticks) * 1000) / 100;
      const rssGrowthMb = (after.hwmKb - before.hwmKb) / 1024;
      console.log(
        `server for three unauthenticated 60 MiB bodies: cpu ${cpuMs} ms, peak rss +${rssGrowthMb.toFixed(1)} MiB, rss ${(after.rssKb / 1024).toFixed(0)} MiB; client wrote ${rest.written} and ${connect.written} bytes before the close`,
      );
      // Near zero: nowhere near the body's size in memory, and no parsing.
      expect(rssGrowthMb).toBeLessThan(16);
      expect(cpuMs).toBeLessThan(1000);
    } finally {
      proc.kill("SIGKILL");
      await rm(dataDir, { recursive: true, force: true });
    }
    // Start-up of a child process on a busy machine.
  }, 240_000);
});
