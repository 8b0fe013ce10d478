// The listener: HTTP/1.1 and cleartext HTTP/2 on one port. Node cannot serve
// both from one http server without TLS, so each new connection's first
// bytes are read: the HTTP/2 connection preface goes to the http2 server,
// anything else to the http server. Graceful shutdown stops accepting,
// lets in-flight calls finish (up to a grace period) and then closes.
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";

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

export async function startServer(opts: { port: number; host: string; handler: RequestHandler }): Promise<RunningServer> {
  let inFlight = 0;
  let idle: (() => void) | undefined;
  const track: RequestHandler = (req, res) => {
    inFlight++;
    res.once("close", () => {
      inFlight--;
      if (inFlight === 0) idle?.();
    });
    opts.handler(req, res);
  };

  const h1 = http.createServer({ keepAliveTimeout: 65_000 }, track);
  const h2 = http2.createServer({}, track);
  const sessions = new Set<http2.Http2Session>();
  h2.on("session", (s) => {
    sessions.add(s);
    s.once("close", () => sessions.delete(s));
  });
  const sockets = new Set<net.Socket>();

  const listener = net.createServer((socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      head = Buffer.concat([head, chunk]);
      const isH2 = sniffHttp2(head);
      if (isH2 === undefined) return;
      socket.off("data", onData);
      socket.pause();
      socket.unshift(head);
      (isH2 ? h2 : h1).emit("connection", socket);
      process.nextTick(() => socket.resume());
    };
    socket.on("data", onData);
  });

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
        if (inFlight > 0) {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, graceMs);
            idle = () => {
              clearTimeout(timer);
              resolve();
            };
          });
        }
        for (const s of sessions) s.destroy();
        for (const s of sockets) s.destroy();
        h1.closeAllConnections();
        await stopped;
      })();
      return closing;
    },
  };
}
