// Every refusal carries its catalogue reason (docs/errors.md), also those the
// listener and the explorer's file server answer before any API code runs:
// the 408 of a request whose headers or body do not arrive in time (HTTP/1.1
// and HTTP/2), and the explorer's 404s and 500.
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import http2 from "node:http2";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { startServer, type RequestHandler, type RunningServer } from "../../src/server.js";
import { withUi } from "../../src/ui-assets.js";

const fallback: RequestHandler = (req, res) => {
  req.resume();
  req.once("end", () => {
    res.writeHead(200, { "content-type": "text/plain" });
    res.end("ok");
  });
};

let srv: RunningServer | undefined;
const dirs: string[] = [];
afterEach(async () => {
  await srv?.close(100);
  srv = undefined;
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

async function start(handler: RequestHandler): Promise<number> {
  srv = await startServer({
    port: 0,
    host: "127.0.0.1",
    handler,
    limits: {
      headersTimeoutMs: 500,
      requestTimeoutMs: 800,
      idleTimeoutMs: 5000,
      maxConnections: 100,
      maxConcurrentStreams: 100,
    },
  });
  return srv.port;
}

/** The JSON body of an HTTP/1.1 answer read off a raw socket. */
function bodyOf(raw: string): unknown {
  return JSON.parse(raw.slice(raw.indexOf("\r\n\r\n") + 4));
}

async function get(port: number, path: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: res.status, body: await res.json() };
}

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "refusal-reasons-"));
  dirs.push(dir);
  return dir;
}

describe("the listener's 408", () => {
  it("carries REQUEST_TIMEOUT over HTTP/1.1 when the headers never complete", async () => {
    const port = await start(fallback);
    const socket = net.connect(port, "127.0.0.1");
    socket.on("error", () => undefined);
    let received = "";
    socket.on("data", (d: Buffer) => (received += d.toString("latin1")));
    socket.on("connect", () => socket.write("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
    await new Promise((resolve) => socket.once("close", resolve));
    expect(received).toMatch(/^HTTP\/1\.1 408 /);
    expect(bodyOf(received)).toEqual({
      code: "deadline_exceeded",
      message: expect.any(String),
      reason: "REQUEST_TIMEOUT",
    });
  });

  it("carries REQUEST_TIMEOUT over HTTP/2 when the body never completes", async () => {
    const port = await start(fallback);
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", () => undefined);
    const stream = session.request({ ":path": "/hold", ":method": "POST" });
    stream.on("error", () => undefined);
    const trickle = setInterval(() => stream.write("x"), 50);
    let text = "";
    stream.on("data", (d: Buffer) => (text += d.toString("utf8")));
    const status = new Promise<number>((resolve) => stream.once("response", (h) => resolve(Number(h[":status"]))));
    // The server ends the stream after its answer, though the client is still sending.
    await new Promise((resolve) => stream.once("close", resolve));
    clearInterval(trickle);
    session.destroy();
    expect(await status).toBe(408);
    expect(JSON.parse(text)).toEqual({
      code: "deadline_exceeded",
      message: expect.stringMatching(/not complete within 800 ms/),
      reason: "REQUEST_TIMEOUT",
    });
  });
});

describe("the explorer's refusals", () => {
  it("answers NOT_FOUND when the explorer is not built", async () => {
    const port = await start(withUi(join(await tempDir(), "missing"), fallback));
    expect(await get(port, "/ui/")).toEqual({
      status: 404,
      body: { code: "not_found", message: expect.stringMatching(/not built/), reason: "NOT_FOUND" },
    });
  });

  it("answers NOT_FOUND for a file the build does not have", async () => {
    const dir = await tempDir();
    await writeFile(join(dir, "index.html"), "<!doctype html>");
    const port = await start(withUi(dir, fallback));
    expect(await get(port, "/ui/nothing.js")).toEqual({
      status: 404,
      body: { code: "not_found", message: "no explorer file nothing.js", reason: "NOT_FOUND" },
    });
  });

  it("answers INTERNAL when the explorer's files cannot be read", async () => {
    const dir = await tempDir();
    await writeFile(join(dir, "index.html"), "<!doctype html>");
    // A folder named like a script: listed, but reading it fails.
    await mkdir(join(dir, "broken.js"));
    const port = await start(withUi(dir, fallback));
    expect(await get(port, "/ui/")).toEqual({
      status: 500,
      body: { code: "internal", message: "internal error", reason: "INTERNAL" },
    });
  });
});
