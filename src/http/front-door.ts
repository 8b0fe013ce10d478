// The first thing every request meets, before the Connect adapter or the
// REST gateway reads a byte of its body (docs/contract/16-limits.md):
// - paths are matched as sent: a `.`/`..` segment (also percent-encoded) or
//   a backslash is 404, so no later normalisation can route it elsewhere;
// - every request is resolved here, once (its RPC method or REST route, kept
//   on its arrival as its resolution), and answered by that resolution;
// - with authentication on, every request must present valid credentials in
//   its headers, except the open operations and the open paths (health,
//   metrics, the OpenAPI document and the explorer: they describe the API
//   and hold no data). That includes paths no route knows: an unknown path
//   answers 401, not 404, so nobody learns the API's shape without a token,
//   and a body sent to it is never read either. Without credentials the
//   request is answered 401 (in the protocol the client speaks) without
//   reading its body, and the connection (HTTP/1.1) or stream (HTTP/2) is
//   closed so the body is never received. The auth interceptor still checks
//   scopes afterwards.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import http2 from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { errorToJson } from "@connectrpc/connect/protocol-connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import type { Authenticator } from "../auth/index.js";
import { declaredScope } from "../auth/index.js";
import { notFound, unauthenticated } from "../errors.js";
import {
  arrive,
  authenticatedAtDoor,
  REQUEST_ID,
  type Arrival,
  type ArrivedHandler,
  type Resolution,
} from "./arrival.js";
import { restErrorOf } from "./error-status.js";

type Req = IncomingMessage | http2.Http2ServerRequest;
type Res = ServerResponse | http2.Http2ServerResponse;
type NodeHandler = (req: Req, res: Res) => void;

export interface FrontDoorOptions {
  readonly auth: Authenticator;
  /**
   * What a request reaches (its Connect/gRPC path, or its REST route), kept
   * on its arrival for every later step: the one lookup of its route. Throws
   * for a path the route table cannot decode (a bad percent escape).
   */
  readonly resolve: (verb: string, rawPath: string, req: Req) => Resolution;
  /**
   * Told of every request refused here for its credentials, so it is logged
   * (and a call counted) like one the interceptors refused: the resolution's
   * method is undefined for a path no operation has, `status` the HTTP status
   * written.
   */
  readonly onRefused?: (resolution: Resolution, err: ConnectError, req: Req, arrival: Arrival, status: number) => void;
}

const DOT_SEGMENT = /^(?:\.|%2e){1,2}$/i;

/** Whether a raw (still percent-encoded) path has a dot segment or a backslash. */
function isUnsafePath(rawPath: string): boolean {
  if (rawPath.includes("\\") || /%5c/i.test(rawPath)) return true;
  return rawPath.split("/").some((seg) => DOT_SEGMENT.test(seg));
}

/** The bare content type, lower case, without parameters. */
function mediaType(req: Req): string {
  return (req.headers["content-type"] ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
}

/** The error body: REST's {code, message, reason} (http/error-status.ts), or Connect's error JSON with its ErrorInfo details. */
function jsonError(req: Req, err: ConnectError): string {
  const path = (req.url ?? "/").split("?")[0] ?? "/";
  return JSON.stringify(RPC_PATH.test(path) ? errorToJson(err, undefined) : restErrorOf(err).body);
}

/** /package.Service/Method: a Connect, gRPC or gRPC-Web call rather than a REST path. */
const RPC_PATH = /^\/[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+\/[A-Za-z_][A-Za-z0-9_]*$/;

/** Answers `err` in the request's protocol without touching its body, then stops the body from coming; returns the HTTP status written. */
export function refuseBeforeBody(req: Req, res: Res, err: ConnectError, httpStatus: number, requestId: string): number {
  const type = mediaType(req);
  const isH2 = "stream" in res;
  const grpc = type.startsWith("application/grpc");
  if (grpc) {
    // grpc-status, grpc-message and grpc-status-details-bin (the ErrorInfo with the reason).
    const trailer = new Headers();
    setTrailerStatus(trailer, err);
    const headers: Record<string, string> = {
      "content-type": type,
      [REQUEST_ID]: requestId,
      ...Object.fromEntries(trailer),
    };
    if (isH2) {
      // Trailers-only: status in the one HEADERS frame that ends the stream.
      res.stream.respond({ ":status": 200, ...headers }, { endStream: true });
      res.stream.close(http2.constants.NGHTTP2_NO_ERROR);
      return 200;
    }
    res.writeHead(200, { ...headers, connection: "close" });
    res.end();
    return 200;
  }
  let status = httpStatus;
  let contentType = "application/json";
  let body: Buffer = Buffer.from(jsonError(req, err));
  if (type.startsWith("application/connect+")) {
    // A Connect stream: HTTP 200 and one end-of-stream envelope with the error.
    status = 200;
    contentType = type;
    const payload = Buffer.from(JSON.stringify({ error: errorToJson(err, undefined) }));
    const head = Buffer.alloc(5);
    head.writeUInt8(0b10, 0);
    head.writeUInt32BE(payload.length, 1);
    body = Buffer.concat([head, payload]);
  }
  if (isH2) {
    res.stream.respond({
      ":status": status,
      "content-type": contentType,
      "content-length": body.length,
      [REQUEST_ID]: requestId,
    });
    res.stream.end(body, () => res.stream.close(http2.constants.NGHTTP2_NO_ERROR));
    return status;
  }
  const socket = (req as IncomingMessage).socket;
  lingerInsteadOfReset(socket);
  res.writeHead(status, {
    "content-type": contentType,
    "content-length": body.length,
    [REQUEST_ID]: requestId,
    connection: "close",
  });
  res.end(body);
  return status;
}

const LINGER_MS = 2000;

/**
 * Closing a socket with unread bytes makes the kernel send a reset, which can
 * destroy the answer before the client reads it (a client still sending its
 * body reads the answer only between writes). So after the answer the socket
 * is half-closed and reading stops: the client's writes back up, it turns to
 * reading, and sees the answer and the end. The socket is destroyed after
 * LINGER_MS. Nothing more of the body is read, so it costs nothing.
 */
function lingerInsteadOfReset(socket: Socket): void {
  socket.destroySoon = function (this: Socket) {
    this.end();
    this.pause();
    // The HTTP parser may read the handle directly (not through the stream):
    // stop the handle itself too.
    (this as unknown as { _handle?: { readStop?: () => void } | null })._handle?.readStop?.();
    const timer = setTimeout(() => this.destroy(), LINGER_MS);
    timer.unref();
    this.once("close", () => clearTimeout(timer));
  };
}

/** Paths open to anyone (docs/contract/12-authentication.md), for GET and HEAD only: a body sent to them is not. */
const OPEN_PATHS: ReadonlySet<string> = new Set(["/healthz", "/readyz", "/metrics", "/openapi.json", "/", "/ui"]);

/** Whether a request without an operation may pass without credentials: the open paths and the explorer's files. */
function isOpenPath(verb: string, rawPath: string): boolean {
  if (verb !== "GET" && verb !== "HEAD") return false;
  return OPEN_PATHS.has(rawPath) || rawPath.startsWith("/ui/");
}

/** Makes each request's arrival (arrival.ts), refuses what must be refused before the body, and passes the rest on with it. */
export function createFrontDoor(opts: FrontDoorOptions, next: ArrivedHandler): NodeHandler {
  return (req, res) => {
    const arrival = arrive(req);
    const rawPath = (req.url ?? "/").split("?", 1)[0] ?? "/";
    if (isUnsafePath(rawPath)) {
      refuseBeforeBody(
        req,
        res,
        notFound(`no route for ${req.method ?? "?"} ${rawPath.slice(0, 200)} (paths are matched as sent)`),
        404,
        arrival.requestId,
      );
      return;
    }
    const verb = (req.method ?? "GET").toUpperCase();
    try {
      arrival.resolution = opts.resolve(verb, rawPath, req);
    } catch (err) {
      // A path the route table cannot even decode (a bad percent escape): with authentication on, refused here,
      // before the body; without, the gateway answers it (its own match throws the same error).
      if (!opts.auth.enabled) return next(req, res, arrival);
      const e = ConnectError.from(err);
      refuseBeforeBody(req, res, e, e.code === Code.InvalidArgument ? 400 : 404, arrival.requestId);
      return;
    }
    if (!opts.auth.enabled) return next(req, res, arrival);
    const method = arrival.resolution.method;
    if (method === undefined ? isOpenPath(verb, rawPath) : declaredScope(method) === "open")
      return next(req, res, arrival);
    const header = req.headers.authorization;
    const authorization = typeof header === "string" ? header : null;
    opts.auth.authenticate(authorization).then(
      (principal) => {
        // The auth interceptor checks the method's scope against this principal, without authenticating again.
        authenticatedAtDoor(arrival, authorization, principal);
        next(req, res, arrival);
      },
      (err: unknown) => {
        const e = ConnectError.from(err);
        const status = refuseBeforeBody(
          req,
          res,
          e,
          e.code === unauthenticated("").code ? 401 : 503,
          arrival.requestId,
        );
        // Logged either way; only a refused call is counted as a call (an unknown path has no operation).
        opts.onRefused?.(arrival.resolution!, e, req, arrival, status);
      },
    );
  };
}
