// docs/contract/16-limits.md on the bare one-port listener: with small
// timeouts, sockets that send nothing, half a request line, or trickle a body
// are closed (HTTP/1.1 and HTTP/2), idle keep-alive connections and HTTP/2
// sessions are closed, MAX_CONNECTIONS refuses beyond the cap and recovers,
// and an HTTP/2 client opening more than MAX_CONCURRENT_STREAMS gets
// REFUSED_STREAM; all the while other clients are answered. Every close is
// timed: no earlier than its limit (less a little for the client's clock
// starting first) and no later than the limit plus one check interval
// (test/server/header-deadline.test.ts does the same against the service).
import http2 from "node:http2";
import net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import {
  checkIntervalMs,
  KEEP_ALIVE_MARGIN_MS,
  startServer,
  type ListenerLimits,
  type RequestHandler,
  type RunningServer,
} from "../../src/server.js";

const handler: RequestHandler = (req, res) => {
  const answer = () => {
    res.writeHead(200, { "content-type": "text/plain" });
    res.end("ok");
  };
  if (req.url === "/hold") {
    // Answers once the body is complete: a trickled body holds it open.
    req.resume();
    req.once("end", () => setTimeout(answer, 200));
    return;
  }
  req.resume();
  req.once("end", answer);
};

const SMALL: ListenerLimits = {
  headersTimeoutMs: 1000,
  requestTimeoutMs: 2000,
  idleTimeoutMs: 1500,
  maxConnections: 10_000,
  maxConcurrentStreams: 100,
};
const INTERVAL = checkIntervalMs(SMALL);

/** Asserts that `ms` (from when the client stopped) lies in the window of `limit`. */
function inWindow(what: string, ms: number, limit: number): void {
  expect({ what, ms: Math.round(ms), earliest: limit * 0.9, latest: limit + INTERVAL }).toEqual({
    what,
    ms: expect.toSatisfy((x: number) => x >= limit * 0.9 && x <= limit + INTERVAL) as number,
    earliest: limit * 0.9,
    latest: limit + INTERVAL,
  });
}

let srv: RunningServer | undefined;
afterEach(async () => {
  await srv?.close(100);
  srv = undefined;
});

async function start(limits: Partial<ListenerLimits> = {}): Promise<RunningServer> {
  srv = await startServer({ port: 0, host: "127.0.0.1", handler, limits: { ...SMALL, ...limits } });
  return srv;
}

/** Opens a socket, writes `first`, and resolves what the server sent before it closed the connection; `ms()` is how long after the connect it closed. */
function openSocket(
  port: number,
  first: string | undefined,
  trickle?: string,
): { closed: Promise<string>; socket: net.Socket; ms: () => number } {
  const socket = net.connect(port, "127.0.0.1");
  let received = "";
  let timer: NodeJS.Timeout | undefined;
  let connectedAt = 0;
  let closedAt = 0;
  socket.on("connect", () => {
    connectedAt = performance.now();
    if (first !== undefined) socket.write(first);
    if (trickle !== undefined) {
      timer = setInterval(() => {
        if (!socket.destroyed) socket.write(trickle);
      }, 200);
    }
  });
  socket.on("data", (d: Buffer) => (received += d.toString("latin1")));
  socket.on("error", () => undefined);
  const closed = new Promise<string>((resolve) =>
    socket.once("close", () => {
      closedAt = performance.now();
      clearInterval(timer);
      resolve(received);
    }),
  );
  return { closed, socket, ms: () => closedAt - connectedAt };
}

async function get(port: number): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${port}/`);
  await res.text();
  return res.status;
}

describe("listener timeouts", () => {
  it("closes a hundred silent, half-sent and trickling connections, each within its window, while answering others", async () => {
    const { port } = await start();
    // Warm the paths (first use compiles them), so that only the deadlines are timed.
    expect(await get(port)).toBe(200);
    const silent = Array.from({ length: 20 }, () => openSocket(port, undefined));
    const halfLine = Array.from({ length: 20 }, () => openSocket(port, "GET /some"));
    const halfHeaders = Array.from({ length: 20 }, () => openSocket(port, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "));
    const h2Preface = Array.from({ length: 10 }, () => openSocket(port, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
    const halfPreface = Array.from({ length: 10 }, () => openSocket(port, "PRI * HTTP/2"));
    const trickling = Array.from({ length: 20 }, () =>
      openSocket(port, "POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", "x"),
    );
    // Others are served while all of those hang on.
    const served = await Promise.all(Array.from({ length: 20 }, () => get(port)));
    expect(served.every((s) => s === 200)).toBe(true);

    // An HTTP/2 client that sent its preface and no request: the server's SETTINGS, then closed.
    for (const { closed, ms } of h2Preface) {
      expect(await closed).not.toContain("HTTP/1.1");
      inWindow("HTTP/2 preface only", ms(), SMALL.headersTimeoutMs);
    }
    for (const { closed, ms } of [...silent, ...halfPreface]) {
      expect(await closed).toBe("");
      inWindow("nothing or half a preface", ms(), SMALL.headersTimeoutMs);
    }
    for (const { closed, ms } of [...halfLine, ...halfHeaders]) {
      expect(await closed).toMatch(/^HTTP\/1\.1 408 /);
      inWindow("half a request line or half the headers", ms(), SMALL.headersTimeoutMs);
    }
    for (const { closed, ms } of trickling) {
      expect(await closed).toMatch(/^HTTP\/1\.1 408 /);
      inWindow("a trickled body", ms(), SMALL.requestTimeoutMs);
    }
    expect(await get(port)).toBe(200);
  });

  it("closes an idle keep-alive connection after a served request", async () => {
    const { port } = await start();
    const { closed, ms } = openSocket(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    expect(await closed).toMatch(/^HTTP\/1\.1 200/);
    // Idle from the response on (a few ms after the connect); Node keeps an idle
    // HTTP/1.1 connection KEEP_ALIVE_MARGIN_MS past the timeout it advertises.
    inWindow("idle keep-alive", ms(), SMALL.idleTimeoutMs + KEEP_ALIVE_MARGIN_MS);
  });

  it("closes an idle HTTP/2 session, and a session that never opens a stream", async () => {
    const { port } = await start();
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", () => undefined);
    let answeredAt = 0;
    const sessionClosed = new Promise<number>((resolve) =>
      session.once("close", () => resolve(performance.now() - answeredAt)),
    );
    const status = await new Promise<number>((resolve, reject) => {
      const stream = session.request({ ":path": "/" });
      stream.on("response", (h) => resolve(Number(h[":status"])));
      stream.on("error", reject);
      stream.resume();
    });
    answeredAt = performance.now();
    expect(status).toBe(200);
    inWindow("idle HTTP/2 session", await sessionClosed, SMALL.idleTimeoutMs);

    const opened = performance.now();
    const bare = http2.connect(`http://127.0.0.1:${port}`);
    bare.on("error", () => undefined);
    await new Promise<void>((resolve) => bare.once("close", () => resolve()));
    inWindow("HTTP/2 session without a stream", performance.now() - opened, SMALL.headersTimeoutMs);
    expect(await get(port)).toBe(200);
  });

  it("answers an HTTP/2 request whose body never completes with 408", async () => {
    const { port } = await start();
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", () => undefined);
    const opened = performance.now();
    const stream = session.request({ ":path": "/hold", ":method": "POST" });
    stream.on("error", () => undefined);
    const trickle = setInterval(() => stream.write("x"), 50);
    const status = await new Promise<number>((resolve) => stream.on("response", (h) => resolve(Number(h[":status"]))));
    clearInterval(trickle);
    expect(status).toBe(408);
    inWindow("HTTP/2 trickled body", performance.now() - opened, SMALL.requestTimeoutMs);
    session.destroy();
  });
});

describe("connection and stream caps", () => {
  it("refuses connections beyond MAX_CONNECTIONS and recovers when others close", async () => {
    const { port } = await start({
      maxConnections: 5,
      headersTimeoutMs: 60_000,
      requestTimeoutMs: 60_000,
      idleTimeoutMs: 60_000,
    });
    const held = Array.from({ length: 5 }, () => openSocket(port, "GET /some"));
    await new Promise((r) => setTimeout(r, 100));
    const refused = openSocket(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    // Closed without an answer.
    expect(await refused.closed).toBe("");
    for (const h of held) h.socket.destroy();
    await Promise.all(held.map((h) => h.closed));
    expect(await get(port)).toBe(200);
  });

  it("refuses HTTP/2 streams beyond MAX_CONCURRENT_STREAMS with REFUSED_STREAM", async () => {
    const { port } = await start({
      maxConcurrentStreams: 2,
      headersTimeoutMs: 60_000,
      requestTimeoutMs: 60_000,
      idleTimeoutMs: 60_000,
    });
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", () => undefined);
    // Sent at once, before the client hears the server's settings.
    const outcomes = await Promise.all(
      Array.from(
        { length: 6 },
        () =>
          new Promise<string>((resolve) => {
            const stream = session.request({ ":path": "/hold", ":method": "POST" });
            stream.on("response", (h) => resolve(String(h[":status"])));
            stream.on("error", () => resolve(`rst ${stream.rstCode ?? "?"}`));
            stream.on("close", () => resolve(`rst ${stream.rstCode ?? "?"}`));
            // Hold the body open a little so the streams overlap.
            setTimeout(() => stream.end(), 300);
          }),
      ),
    );
    session.destroy();
    expect(outcomes.filter((o) => o === "200").length).toBeGreaterThan(0);
    expect(outcomes).toContain(`rst ${http2.constants.NGHTTP2_REFUSED_STREAM}`);
    expect(await get(port)).toBe(200);
  });
});
