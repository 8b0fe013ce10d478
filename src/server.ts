// The listener: HTTP/1.1 and cleartext HTTP/2 on one port. Node cannot serve
// both from one http server without TLS, so each new connection's first
// bytes are read: the HTTP/2 connection preface goes to the http2 server,
// anything else to the http server. Graceful shutdown stops accepting,
// lets in-flight calls finish (up to a grace period) and then closes.
//
// Timeouts (docs/contract/16-limits.md): the sniff itself has
// HEADERS_TIMEOUT_MS from the moment the connection is accepted. An HTTP/1.1
// connection then has a deadline of its own for each request's headers and
// for the whole request, measured from its first byte and, on a kept-alive
// connection, from the end of the previous response; a connection past one
// gets 408 and is closed. These are timers per connection, so a close comes
// at the limit (plus the event loop's delay), not at the next sweep. Node's
// own sweep (headersTimeout/requestTimeout, every CHECK interval) stays as a
// second line: it also covers a kept-alive connection that sat idle and
// then started a request it never finished (measured from that request's
// first byte). The HTTP/1.1 server never listens (connections are handed to
// it), so that sweep is started by hand. HTTP/2 sessions get a headers
// deadline until their first stream (a client that sends the preface and
// stops, or stops inside a HEADERS frame, never makes a stream), an idle
// timeout, a per-stream request deadline and a cap on concurrent streams.
// MAX_CONNECTIONS caps the sockets the listener accepts.
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { DEFENCE_DEFAULTS } from "./config.js";
import { serviceError } from "./errors.js";
import { restErrorOf, writeRestError } from "./http/error-status.js";

export type RequestHandler = (
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

export interface RunningServer {
  /** The bound port (useful with port 0). */
  readonly port: number;
  readonly host: string;
  /** Stop accepting, wait for in-flight requests up to graceMs, then close every connection. */
  close(graceMs: number): Promise<void>;
}

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** Whether `head` starts the HTTP/2 preface (true), cannot (false), or is too short to tell (undefined). */
export function sniffHttp2(head: Buffer): boolean | undefined {
  const n = Math.min(head.length, PREFACE.length);
  if (head.subarray(0, n).equals(PREFACE.subarray(0, n))) return n === PREFACE.length ? true : undefined;
  return false;
}

export interface ListenerLimits {
  readonly headersTimeoutMs: number;
  readonly requestTimeoutMs: number;
  readonly idleTimeoutMs: number;
  readonly maxConnections: number;
  readonly maxConcurrentStreams: number;
}

const DEFAULT_LISTENER_LIMITS: ListenerLimits = {
  headersTimeoutMs: DEFENCE_DEFAULTS.HEADERS_TIMEOUT_MS,
  requestTimeoutMs: DEFENCE_DEFAULTS.REQUEST_TIMEOUT_MS,
  idleTimeoutMs: DEFENCE_DEFAULTS.IDLE_TIMEOUT_MS,
  maxConnections: DEFENCE_DEFAULTS.MAX_CONNECTIONS,
  maxConcurrentStreams: DEFENCE_DEFAULTS.MAX_CONCURRENT_STREAMS,
};

/**
 * How often Node's sweep looks for HTTP/1.1 connections past their
 * deadlines, and so the most a close may come after its limit: the
 * tolerance the tests hold every timeout to.
 */
export function checkIntervalMs(limits: Pick<ListenerLimits, "headersTimeoutMs" | "requestTimeoutMs">): number {
  return Math.max(25, Math.min(1000, Math.floor(Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs) / 4)));
}

/**
 * Node closes an idle HTTP/1.1 keep-alive connection this long after the
 * timeout it advertises in Keep-Alive (so that a client trusting the header
 * never races the close): IDLE_TIMEOUT_MS plus this, for HTTP/1.1.
 */
export const KEEP_ALIVE_MARGIN_MS = 1000;

/** What Node itself answers to a request past its deadline before any response began, with the catalogue's body. */
const REQUEST_TIMEOUT_BODY = JSON.stringify(
  restErrorOf(serviceError("REQUEST_TIMEOUT", "the request's headers or body did not arrive in time")).body,
);
const REQUEST_TIMEOUT_RESPONSE = `HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(REQUEST_TIMEOUT_BODY)}\r\n\r\n${REQUEST_TIMEOUT_BODY}`;

/** The deadlines of one HTTP/1.1 connection. */
interface H1Deadlines {
  /** When the current (or next) request's clock started: the first byte, then the end of each response. */
  startedAt: number;
  /** socket.bytesRead at startedAt: more means the next request has begun (-1: the first request, begun by definition). */
  bytesAtStart: number;
  /** Requests whose headers arrived and whose response has not finished (pipelining can make it more than one). */
  open: number;
  headers: NodeJS.Timeout | undefined;
}

/** Closes `socket` as Node does for a request past its deadline: 408 unless a response already began. */
function timeOut(socket: net.Socket, answered: boolean): void {
  if (socket.destroyed) return;
  if (!answered && socket.writable) socket.write(REQUEST_TIMEOUT_RESPONSE);
  socket.destroy();
}

/** An HTTP/2 stream whose request body is not complete in time: 408 if nothing was answered yet, else cancelled. */
function deadlineForStream(req: http2.Http2ServerRequest, res: http2.Http2ServerResponse, ms: number): void {
  if (req.complete) return;
  const timer = setTimeout(() => {
    if (req.complete || res.stream.destroyed) return;
    if (!res.headersSent) {
      res.stream.once("finish", () => res.stream.close(http2.constants.NGHTTP2_CANCEL));
      writeRestError(res, serviceError("REQUEST_TIMEOUT", `the request body was not complete within ${ms} ms`));
    } else {
      res.stream.close(http2.constants.NGHTTP2_CANCEL);
    }
  }, ms);
  timer.unref();
  const clear = () => clearTimeout(timer);
  req.once("end", clear);
  res.once("close", clear);
}

/** How long closed-but-not-yet-flushed HTTP/2 sessions get to end themselves at shutdown. */
const FLUSH_MS = 2000;

/** Resolves once every session in `sessions` has closed, or after `ms`. */
function sessionsClosed(sessions: ReadonlySet<http2.Http2Session>, ms: number): Promise<void> {
  const open = [...sessions].filter((s) => !s.destroyed);
  if (open.length === 0 || ms === 0) return Promise.resolve();
  return new Promise<void>((resolve) => {
    let left = open.length;
    const timer = setTimeout(resolve, ms);
    for (const s of open) {
      s.once("close", () => {
        left -= 1;
        if (left === 0) {
          clearTimeout(timer);
          resolve();
        }
      });
    }
  });
}

export async function startServer(opts: {
  port: number;
  host: string;
  handler: RequestHandler;
  limits?: ListenerLimits;
}): Promise<RunningServer> {
  const limits = opts.limits ?? DEFAULT_LISTENER_LIMITS;
  let inFlight = 0;
  let idle: (() => void) | undefined;
  const track: RequestHandler = (req, res) => {
    inFlight++;
    res.once("close", () => {
      inFlight--;
      if (inFlight === 0) idle?.();
    });
    if ("stream" in res) deadlineForStream(req as http2.Http2ServerRequest, res, limits.requestTimeoutMs);
    opts.handler(req, res);
  };

  const headersTimeout = Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs);
  const h1 = http.createServer(
    {
      keepAliveTimeout: limits.idleTimeoutMs,
      headersTimeout,
      requestTimeout: limits.requestTimeoutMs,
      // How often Node looks for connections past those two deadlines.
      connectionsCheckingInterval: checkIntervalMs(limits),
    },
    track,
  );
  const h1Deadlines = new WeakMap<net.Socket, H1Deadlines>();
  /** Arms the headers deadline of the request whose clock started at d.startedAt. */
  const armHeaders = (socket: net.Socket, d: H1Deadlines): void => {
    clearTimeout(d.headers);
    d.headers = setTimeout(
      () => {
        // A kept-alive connection with no byte of a next request is idle, not late: IDLE_TIMEOUT_MS governs it.
        if (d.open > 0 || (d.bytesAtStart >= 0 && socket.bytesRead === d.bytesAtStart)) return;
        timeOut(socket, false);
      },
      Math.max(0, d.startedAt + headersTimeout - Date.now()),
    );
    d.headers.unref();
  };
  const handOverH1 = (socket: net.Socket, firstByteAt: number): void => {
    const d: H1Deadlines = { startedAt: firstByteAt, bytesAtStart: -1, open: 0, headers: undefined };
    h1Deadlines.set(socket, d);
    armHeaders(socket, d);
    socket.once("close", () => clearTimeout(d.headers));
  };
  h1.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
    const socket = req.socket;
    const d = h1Deadlines.get(socket);
    if (d === undefined) return;
    clearTimeout(d.headers);
    d.open++;
    // The whole request (its body) within REQUEST_TIMEOUT_MS of its clock's start.
    let body: NodeJS.Timeout | undefined;
    const length = req.headers["content-length"];
    const mayHaveBody = req.headers["transfer-encoding"] !== undefined || (length !== undefined && length !== "0");
    if (mayHaveBody && !req.complete) {
      body = setTimeout(
        () => {
          if (!req.complete) timeOut(socket, res.headersSent);
        },
        Math.max(0, d.startedAt + limits.requestTimeoutMs - Date.now()),
      );
      body.unref();
      req.once("end", () => clearTimeout(body));
    }
    res.once("close", () => {
      clearTimeout(body);
      d.open--;
      if (d.open > 0 || socket.destroyed) return;
      // The next request's clock starts now (docs/contract/16-limits.md).
      d.startedAt = Date.now();
      d.bytesAtStart = socket.bytesRead;
      armHeaders(socket, d);
    });
  });
  // Node starts its header/request timeout checker when the server starts
  // listening; this one never listens (the sniffing listener hands it its
  // connections), so it is started here, as listen() would.
  h1.emit("listening");
  const h2 = http2.createServer({ settings: { maxConcurrentStreams: limits.maxConcurrentStreams } }, track);
  // An idle session (no frames for this long) is closed: without a "timeout"
  // listener on the server, Node destroys the session.
  h2.setTimeout(limits.idleTimeoutMs);
  const sessions = new Set<http2.Http2Session>();
  h2.on("session", (s) => {
    sessions.add(s);
    s.once("close", () => sessions.delete(s));
    // The first request's headers must arrive within the headers timeout.
    const noHeaders = setTimeout(() => s.destroy(), limits.headersTimeoutMs);
    noHeaders.unref();
    s.once("stream", () => clearTimeout(noHeaders));
    s.once("close", () => clearTimeout(noHeaders));
  });
  const sockets = new Set<net.Socket>();

  // noDelay: as http.createServer does for the sockets it accepts itself. A
  // plain net.Server leaves Nagle's algorithm on, which held an answer's
  // last small write (gRPC trailers, say) until the client acknowledged the
  // one before: measured ~2 ms on every gRPC read.
  const listener = net.createServer({ noDelay: true }, (socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    // The bytes that tell HTTP/1.1 from HTTP/2 fall under the headers timeout too.
    const undecided = setTimeout(() => socket.destroy(), limits.headersTimeoutMs);
    undecided.unref();
    socket.once("close", () => clearTimeout(undecided));
    let head = Buffer.alloc(0);
    let firstByteAt = 0;
    const onData = (chunk: Buffer): void => {
      if (head.length === 0) firstByteAt = Date.now();
      head = Buffer.concat([head, chunk]);
      const isH2 = sniffHttp2(head);
      if (isH2 === undefined) return;
      clearTimeout(undecided);
      socket.off("data", onData);
      socket.pause();
      socket.unshift(head);
      if (isH2) h2.emit("connection", socket);
      else {
        handOverH1(socket, firstByteAt);
        h1.emit("connection", socket);
      }
      process.nextTick(() => socket.resume());
    };
    socket.on("data", onData);
  });
  // Beyond this many open sockets new connections are closed at once.
  listener.maxConnections = limits.maxConnections;

  await new Promise<void>((resolve, reject) => {
    listener.once("error", reject);
    listener.listen(opts.port, opts.host, () => {
      listener.off("error", reject);
      resolve();
    });
  });
  const address = listener.address() as net.AddressInfo;

  let closing: Promise<void> | undefined;
  return {
    port: address.port,
    host: opts.host,
    close(graceMs: number) {
      closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => listener.close(() => resolve()));
        // Tell clients to go elsewhere: HTTP/2 sends GOAWAY and lets open
        // streams finish; HTTP/1.1 closes idle keep-alive connections and
        // answers "Connection: close" on the ones still busy.
        for (const s of sessions) s.close();
        h1.closeIdleConnections();
        h1.on("request", (_req, res) => res.setHeader("connection", "close"));
        const deadline = Date.now() + graceMs;
        if (inFlight > 0) {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, graceMs);
            idle = () => {
              clearTimeout(timer);
              resolve();
            };
          });
        }
        // A stream's response can be done while its last frames (the
        // trailers, END_STREAM, GOAWAY) still sit in the session's buffers:
        // destroying the session now would turn a clean end into a reset.
        // Sessions asked to close end themselves once flushed; wait for that
        // (briefly, and never past the grace period) before forcing them.
        await sessionsClosed(sessions, Math.max(0, Math.min(FLUSH_MS, deadline - Date.now())));
        for (const s of sessions) s.destroy();
        for (const s of sockets) s.destroy();
        h1.closeAllConnections();
        // Stops the timeout checker started above (the server never listened).
        h1.close(() => undefined);
        await stopped;
      })();
      return closing;
    },
  };
}
