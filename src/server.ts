// The listener: HTTP/1.1 and cleartext HTTP/2 on one port. Node cannot serve
// both from one http server without TLS, so each new connection's first
// bytes are read: the HTTP/2 connection preface goes to the http2 server,
// anything else to the http server. Graceful shutdown stops accepting,
// lets in-flight calls finish (up to a grace period) and then closes.
//
// Timeouts (docs/contract/16-limits.md): the sniff itself has HEADERS_TIMEOUT_MS; the
// HTTP/1.1 server never listens (connections are handed to it), so its own
// header/request timeout checker is started by hand; HTTP/2 sessions get a
// headers deadline until their first stream, an idle timeout, a per-stream
// request deadline and a cap on concurrent streams. MAX_CONNECTIONS caps the
// sockets the listener accepts.
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { DEFENCE_DEFAULTS } from "./config.js";

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

export const DEFAULT_LISTENER_LIMITS: ListenerLimits = {
  headersTimeoutMs: DEFENCE_DEFAULTS.HEADERS_TIMEOUT_MS,
  requestTimeoutMs: DEFENCE_DEFAULTS.REQUEST_TIMEOUT_MS,
  idleTimeoutMs: DEFENCE_DEFAULTS.IDLE_TIMEOUT_MS,
  maxConnections: DEFENCE_DEFAULTS.MAX_CONNECTIONS,
  maxConcurrentStreams: DEFENCE_DEFAULTS.MAX_CONCURRENT_STREAMS,
};

/** An HTTP/2 stream whose request body is not complete in time: 408 if nothing was answered yet, else cancelled. */
function deadlineForStream(req: http2.Http2ServerRequest, res: http2.Http2ServerResponse, ms: number): void {
  if (req.complete) return;
  const timer = setTimeout(() => {
    if (req.complete || res.stream.destroyed) return;
    if (!res.headersSent) {
      const body = JSON.stringify({ code: "deadline_exceeded", message: `the request body was not complete within ${ms} ms` });
      res.writeHead(408, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      res.end(body, () => res.stream.close(http2.constants.NGHTTP2_CANCEL));
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

export async function startServer(opts: { port: number; host: string; handler: RequestHandler; limits?: ListenerLimits }): Promise<RunningServer> {
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
      connectionsCheckingInterval: Math.max(25, Math.min(1000, Math.floor(headersTimeout / 4))),
    },
    track,
  );
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
    const onData = (chunk: Buffer): void => {
      head = Buffer.concat([head, chunk]);
      const isH2 = sniffHttp2(head);
      if (isH2 === undefined) return;
      clearTimeout(undecided);
      socket.off("data", onData);
      socket.pause();
      socket.unshift(head);
      (isH2 ? h2 : h1).emit("connection", socket);
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
