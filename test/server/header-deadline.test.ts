// The header deadline of docs/contract/16-limits.md against the service as
// `npm start` builds it: createApp behind the real listener (in this process)
// and src/main.ts itself (a child process). A connection whose request stops
// anywhere before its headers are complete is closed no earlier than
// HEADERS_TIMEOUT_MS and no later than HEADERS_TIMEOUT_MS plus one check
// interval (checkIntervalMs), with 408 where HTTP/1.1 allows one: before the
// first byte, inside the bytes that tell HTTP/1.1 from HTTP/2, inside and
// after the request line, after a complete header line, inside one, on a
// kept-alive connection after the previous response, and for HTTP/2 after
// the preface, after the client's SETTINGS and inside a HEADERS frame.
import { mkdtemp, rm } from "node:fs/promises";
import http2 from "node:http2";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkIntervalMs } from "../../src/server.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { listeningPort, startMain, type MainProcess } from "../support/main-process.js";

const LIMITS = { HEADERS_TIMEOUT_MS: "1000", REQUEST_TIMEOUT_MS: "3000", IDLE_TIMEOUT_MS: "5000" };
const HEADERS_MS = Number(LIMITS.HEADERS_TIMEOUT_MS);
const INTERVAL_MS = checkIntervalMs({
  headersTimeoutMs: HEADERS_MS,
  requestTimeoutMs: Number(LIMITS.REQUEST_TIMEOUT_MS),
});
/** The latest a close may come, from the moment the request stopped. */
const LATEST_MS = HEADERS_MS + INTERVAL_MS;
/**
 * The earliest: the server's clock starts when it accepts (or sees the first
 * byte), which the client may hear of a little later than it happened; not
 * absurdly early.
 */
const EARLIEST_MS = HEADERS_MS * 0.9;

const PREFACE = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/** An empty SETTINGS frame: what a client sends right after the preface. */
const SETTINGS = Buffer.from([0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
/** HPACK of :method GET, :scheme http, :path /healthz (literal), :authority 127.0.0.1 (literal). */
const HPACK = Buffer.concat([
  Buffer.from([0x82, 0x86, 0x04, 0x08]),
  Buffer.from("/healthz"),
  Buffer.from([0x01, 0x09]),
  Buffer.from("127.0.0.1"),
]);
/** A HEADERS frame on stream 1 with END_STREAM but without END_HEADERS: the server must wait for a CONTINUATION that never comes. */
const HEADERS_NO_END = Buffer.concat([Buffer.from([0, 0, HPACK.length, 0x1, 0x1, 0, 0, 0, 1]), HPACK]);
/** A HEADERS frame that announces more payload than is sent. */
const HEADERS_CUT = Buffer.concat([Buffer.from([0, 0, HPACK.length + 20, 0x1, 0x5, 0, 0, 0, 1]), HPACK]);

interface Closed {
  /** From the moment the client stopped sending (its last write, or the connect when it sends nothing). */
  readonly afterStopMs: number;
  readonly received: string;
}

/**
 * Connects, sends `parts` (a function of what came back, for the kept-alive
 * case) and stops; resolves when the server closes. The client never gives
 * up by itself before 4 × the limit, so a late close is measured, not hidden.
 */
function stopAndWait(port: number, send: (socket: net.Socket) => Promise<void>): Promise<Closed> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1");
    let received = "";
    let stoppedAt = 0;
    socket.on("data", (d: Buffer) => (received += d.toString("latin1")));
    socket.on("error", () => undefined);
    const guard = setTimeout(() => {
      socket.destroy();
      reject(new Error(`still open after ${4 * HEADERS_MS} ms; received ${JSON.stringify(received.slice(0, 200))}`));
    }, 4 * HEADERS_MS);
    socket.once("close", () => {
      clearTimeout(guard);
      resolve({ afterStopMs: performance.now() - stoppedAt, received });
    });
    socket.on("connect", () => {
      stoppedAt = performance.now();
      void send(socket).then(() => (stoppedAt = performance.now()));
    });
  });
}

const write = (socket: net.Socket, bytes: string | Buffer): Promise<void> =>
  new Promise((resolve) => socket.write(bytes, () => resolve()));

/** Sends a whole request, waits for its whole response (the body of /healthz), then sends `rest`. */
async function afterResponse(socket: net.Socket, rest: string): Promise<void> {
  await write(socket, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  await new Promise<void>((resolve) => {
    let got = "";
    const onData = (d: Buffer): void => {
      got += d.toString("latin1");
      if (got.includes('{"status":"ok"}')) {
        socket.off("data", onData);
        resolve();
      }
    };
    socket.on("data", onData);
  });
  if (rest !== "") await write(socket, rest);
}

type Case = readonly [name: string, send: (s: net.Socket) => Promise<void>, answer: RegExp];
const NOTHING = /^$/;
const TIMED_OUT = /^HTTP\/1\.1 408 /;
const cases: readonly Case[] = [
  ["HTTP/1.1: before the first byte", () => Promise.resolve(), NOTHING],
  ["undecided: inside the HTTP/2 preface", (s) => write(s, "PRI * HTTP/2"), NOTHING],
  ["HTTP/1.1: inside the request line", (s) => write(s, "GET /heal"), TIMED_OUT],
  ["HTTP/1.1: after the request line", (s) => write(s, "GET /healthz HTTP/1.1\r\n"), TIMED_OUT],
  [
    "HTTP/1.1: after a complete header line",
    (s) => write(s, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"),
    TIMED_OUT,
  ],
  [
    "HTTP/1.1: inside a header line",
    (s) => write(s, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: abc"),
    TIMED_OUT,
  ],
  [
    "HTTP/1.1: a POST whose headers stop before the blank line",
    (s) =>
      write(
        s,
        "POST /resources/read HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n",
      ),
    TIMED_OUT,
  ],
  [
    "HTTP/1.1 kept alive: after the previous response, inside the next request line",
    (s) => afterResponse(s, "GET /hea"),
    /^HTTP\/1\.1 200 [^]*HTTP\/1\.1 408 /,
  ],
  [
    "HTTP/1.1 kept alive: after the previous response, inside the next headers",
    (s) => afterResponse(s, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Sl"),
    /^HTTP\/1\.1 200 [^]*HTTP\/1\.1 408 /,
  ],
  ["HTTP/2: the preface, then nothing", (s) => write(s, PREFACE), /^[^]*$/],
  [
    "HTTP/2: the preface and SETTINGS, then nothing",
    (s) => write(s, Buffer.concat([Buffer.from(PREFACE), SETTINGS])),
    /^[^]*$/,
  ],
  [
    "HTTP/2: inside a HEADERS block (no CONTINUATION)",
    (s) => write(s, Buffer.concat([Buffer.from(PREFACE), SETTINGS, HEADERS_NO_END])),
    /^[^]*$/,
  ],
  [
    "HTTP/2: inside a HEADERS frame (payload cut)",
    (s) => write(s, Buffer.concat([Buffer.from(PREFACE), SETTINGS, HEADERS_CUT])),
    /^[^]*$/,
  ],
];

/** One HTTP/1.1 and one HTTP/2 request, so that the first use of each path (module loading, compilation) is not timed below. */
async function warmUp(port: number): Promise<void> {
  expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on("error", () => undefined);
  const status = await new Promise<unknown>((resolve) => {
    const stream = session.request({ ":path": "/healthz" });
    stream.on("response", (h) => resolve(h[":status"]));
    stream.on("error", resolve);
    stream.resume();
  });
  session.destroy();
  expect(status).toBe(200);
}

/** Every case at once (they must not hold each other up), then each close checked against the window. */
async function checkAll(port: number): Promise<void> {
  await warmUp(port);
  const results = await Promise.all(cases.map(([, send]) => stopAndWait(port, send)));
  const report = cases.map(([name, , answer], i) => {
    const r = results[i] as Closed;
    return {
      name,
      ms: Math.round(r.afterStopMs),
      inWindow: r.afterStopMs >= EARLIEST_MS && r.afterStopMs <= LATEST_MS,
      answered: answer.test(r.received),
    };
  });
  if (process.env.DEADLINE_TRACE) console.log(JSON.stringify(report));
  expect(report.filter((r) => !r.inWindow || !r.answered)).toEqual([]);
  // And the service still answers.
  expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
}

/** An HTTP/2 client as a library makes it: connected, no request; closed within the window. */
async function idleH2Client(port: number): Promise<number> {
  const started = performance.now();
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on("error", () => undefined);
  await new Promise<void>((resolve) => session.once("close", () => resolve()));
  return performance.now() - started;
}

describe("header deadline: createApp behind the real listener", () => {
  let srv: TestServer;
  beforeAll(async () => {
    srv = await startTestServer(LIMITS);
  }, 60_000);
  afterAll(async () => {
    await srv?.close();
  });

  it(`closes a request stopped anywhere in its headers within ${HEADERS_MS} + ${INTERVAL_MS} ms`, async () => {
    await checkAll(srv.port);
  }, 30_000);

  it("an HTTP/2 client that connects and never asks is closed within the window", async () => {
    const ms = await idleH2Client(srv.port);
    expect(ms).toBeGreaterThanOrEqual(EARLIEST_MS);
    expect(ms).toBeLessThanOrEqual(LATEST_MS);
  });

  it("a kept-alive connection that sends nothing more is left to IDLE_TIMEOUT_MS, not the header deadline", async () => {
    const started = performance.now();
    const closed = await stopAndWait(srv.port, (s) => afterResponse(s, "")).catch((e: unknown) => e);
    // The guard (4 × the header limit) gives up first: the idle connection outlived the header deadline.
    expect(closed).toBeInstanceOf(Error);
    expect(performance.now() - started).toBeGreaterThanOrEqual(4 * HEADERS_MS - 50);
  }, 30_000);
});

describe("header deadline: src/main.ts (npm start)", () => {
  let main: MainProcess;
  let port: number;
  let dataDir: string;
  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "rs-deadline-"));
    main = startMain({ ...LIMITS, DATA_DIR: dataDir });
    port = await listeningPort(main);
  }, 90_000);
  afterAll(async () => {
    main?.proc.kill("SIGKILL");
    await main?.exited;
    await rm(dataDir, { recursive: true, force: true });
  });

  it(`closes a request stopped anywhere in its headers within ${HEADERS_MS} + ${INTERVAL_MS} ms`, async () => {
    await checkAll(port);
  }, 30_000);
});
