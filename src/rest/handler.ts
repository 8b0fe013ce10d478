// The REST gateway: resolve a request to its route (once, for the front
// door, which keeps it on the arrival), build the request message, call the
// method through the lane (so every interceptor runs), write REST JSON.
import type { ServerResponse } from "node:http";
import type { Http2ServerResponse } from "node:http2";
import { create } from "@bufbuild/protobuf";
import type {
  DescMessage,
  DescMethod,
  DescMethodServerStreaming,
  DescMethodUnary,
  Message,
  MessageShape,
} from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import type { Transport } from "@connectrpc/connect";
import { createAsyncIterable, type Compression } from "@connectrpc/connect/protocol";
import { notFound, unimplemented, unsupportedMediaType } from "../errors.js";
import { abortOnCloseLazily } from "../http/abort-on-close.js";
import { hasBody } from "../http/read-body.js";
import { webHeaders } from "../http/headers.js";
import { arrive, type Arrival, type Resolution } from "../http/arrival.js";
import { authenticatedKey, type Authenticated } from "../auth/index.js";
import { constantDocument, isConstantOperation, sendConstant } from "../http/constant-document.js";
import type { ConstantDocument } from "../http/constant-document.js";
import type { HttpBody } from "../../gen/google/api/httpbody_pb.js";
import type { WatchResponse } from "../../gen/resourcestore/type/v1/event_pb.js";
import { parseJsonBody } from "./body-reader.js";
import { readDecodedBody, type AnyRequest } from "../http/read-body.js";
import type { FlatWriteOptions } from "../schema/flat-codec.js";
import { eventStreamQuery, isEventStream, writeEventStream } from "./event-stream.js";
import { writeHttpBodyStream } from "./http-body-stream.js";
import type { UnaryLane } from "../rpc/index.js";
import { decodeRestRequest } from "./request-decoder.js";
import { fieldToRest, messageToRest } from "./response-encoder.js";
import { buildRouteTable, findRoute } from "./routes.js";
import type { Route, RouteMatch, RouteTable } from "./routes.js";
import type { Revision } from "../schema/http-rules.js";
import { writeJson, writeRestError } from "../http/error-status.js";

type AnyResponse = ServerResponse | Http2ServerResponse;

export interface RestOptions {
  /** In order; the last revision that has an operation serves its unprefixed path. */
  readonly revisions: readonly Revision[];
  /** Where calls go without a lane (tests serve the gateway over a router transport of their own). */
  readonly transport: Transport;
  /**
   * Where calls go: the server's interceptors and handlers, called in
   * process (rpc/unary-lane.ts) with the request's context values.
   */
  readonly lane?: UnaryLane;
  /** A larger body is 413 resource_exhausted and nothing runs. */
  readonly maxBodyBytes: number;
  /** The content-encodings a body may come in (the pipeline's, as on the RPC surfaces); another is 415. */
  readonly acceptCompression: readonly Compression[];
  /**
   * What the auth interceptor checks (checkScope). When given, a constant
   * operation's cached answer (constant-document.ts) is sent after this
   * check alone, without running the call again; otherwise every request
   * still runs the call through the transport. Undefined (or a throw) when
   * the answer is known at once, a promise when credentials must be checked.
   */
  readonly authorize?: (
    method: DescMethod,
    message: Message,
    authorization: string | null,
    atDoor: Authenticated | undefined,
  ) => Promise<void> | undefined;
  /**
   * Told of every cached constant answer (err undefined) and of every refusal
   * of one by `authorize`: such a call never reaches the interceptors, so this
   * gives it its log line and metrics.
   */
  readonly onConstant?: (method: DescMethod, err: ConnectError | undefined, arrival: Arrival, req: AnyRequest) => void;
  /** EXPORT_STALL_MS: a raw body stream whose client takes nothing for this long is closed. */
  readonly stallMs?: number;
}

const HTTP_BODY = "google.api.HttpBody";

/** application/json, with parameters such as charset allowed. */
function isJsonContentType(value: string | undefined): boolean {
  return /^application\/json\s*(;|$)/i.test(value ?? "");
}

/** The request headers the interceptors care about: credentials, x-* (request ids) and W3C trace context. */
function isForwarded(name: string): boolean {
  return name === "authorization" || name.startsWith("x-") || name === "traceparent" || name === "tracestate";
}

/** x-* headers the handlers or interceptors set (a request id, say) go back to the client. */
function echoedHeaders(header: Headers | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  header?.forEach((value, name) => {
    if (name.startsWith("x-")) out[name] = value;
  });
  return out;
}

/** Request-dependent shape of the answer: `children` only where it can be excluded, select_columns. */
function writeOptionsFor(input: DescMessage, request: MessageShape<DescMessage>): FlatWriteOptions {
  const record = request as unknown as Record<string, unknown>;
  const exclude = input.fields.find((f) => f.name === "exclude_children");
  const select = input.fields.find((f) => f.name === "select_columns" && f.fieldKind === "list");
  const columns = select ? (record[select.localName] as string[]) : [];
  return {
    children: exclude !== undefined && record[exclude.localName] !== true,
    ...(columns.length > 0 ? { select: new Set(columns) } : {}),
  };
}

/** True once the client can no longer be answered (either HTTP version). */
function isGone(res: AnyResponse): boolean {
  if (res.writableEnded) return true;
  return "stream" in res ? res.stream.destroyed : res.destroyed;
}

function methodNotAllowed(res: AnyResponse, verb: string, path: string, allowed: readonly string[]): void {
  const err = unimplemented(`${verb} is not allowed on ${path}; allowed: ${allowed.join(", ")}`, "METHOD_NOT_ALLOWED");
  writeRestError(res, err, { allow: allowed.join(", ") });
}

/** Serialised answers of the constant operations (see constant-document.ts), per route. */
type ConstantCache = Map<Route, ConstantDocument>;

/** A constant operation's cached answer, after the auth interceptor's own check; logged and counted as a call. */
function sendCachedConstant(
  opts: RestOptions,
  method: DescMethod,
  request: Message,
  doc: ConstantDocument,
  req: AnyRequest,
  res: AnyResponse,
  arrival: Arrival,
): Promise<void> | undefined {
  const refused = (err: unknown): never => {
    opts.onConstant?.(method, ConnectError.from(err), arrival, req);
    throw err;
  };
  const send = (): void => {
    sendConstant(req, res, doc);
    opts.onConstant?.(method, undefined, arrival, req);
  };
  let check: Promise<void> | undefined;
  try {
    check = opts.authorize!(method, request, req.headers.authorization ?? null, arrival.values.get(authenticatedKey));
  } catch (err) {
    return refused(err);
  }
  // Without credentials to check (authentication off, or an open operation) the answer goes out in this tick.
  if (check === undefined) {
    send();
    return undefined;
  }
  return check.then(send, refused);
}

async function serve(
  opts: RestOptions,
  constants: ConstantCache,
  route: Route,
  req: AnyRequest,
  res: AnyResponse,
  url: RequestTarget,
  bindings: Parameters<typeof decodeRestRequest>[1]["bindings"],
  arrival: Arrival,
): Promise<void> {
  // docs/contract/15-browsers.md: a body must be JSON (a page on another site cannot send that without a preflight).
  if (hasBody(req) && !isJsonContentType(req.headers["content-type"]))
    throw unsupportedMediaType(req.headers["content-type"] ?? "");
  let body: unknown;
  if (route.body !== "") body = parseJsonBody(await readDecodedBody(req, opts.maxBodyBytes, opts.acceptCompression));
  const { method } = route;
  const query = isEventStream(method) ? eventStreamQuery(req, url.searchParams) : url.searchParams;
  const request = decodeRestRequest(method.input, { bindings, query, body, bodyField: route.body });
  const cached = constants.get(route);
  if (cached !== undefined && opts.authorize !== undefined)
    return sendCachedConstant(opts, method, request, cached, req, res, arrival);
  // Made only if the call asks for it (most unary calls never do).
  const signal = abortOnCloseLazily(res);
  const header = webHeaders(req, isForwarded);
  const writeOpts = writeOptionsFor(method.input, request);
  // A call through the lane: in process, with the request's arrival for its context values.
  const laneCall = <M>(m: M) => ({
    method: m,
    message: request,
    header,
    signal,
    protocolName: "rest",
    requestMethod: route.verb,
    url: url.href,
    contextValues: arrival.values,
  });

  if (method.methodKind === "server_streaming") {
    const streaming = method as DescMethodServerStreaming;
    // In process, with the arrival's context values, as the unary calls below.
    const response =
      opts.lane === undefined
        ? await opts.transport.stream(
            streaming,
            signal(),
            undefined,
            header,
            createAsyncIterable([request]),
            arrival.values,
          )
        : await opts.lane.stream(laneCall(streaming));
    if (method.output.typeName === HTTP_BODY) {
      await writeHttpBodyStream(
        res,
        response.message as AsyncIterable<HttpBody>,
        echoedHeaders(response.header),
        opts.stallMs,
      );
      return;
    }
    if (isEventStream(method)) {
      await writeEventStream(
        res,
        method.output,
        response.message as AsyncIterable<WatchResponse>,
        echoedHeaders(response.header),
      );
      return;
    }
    // Other streams have no REST shape of their own: one JSON array.
    const items = [];
    for await (const m of response.message) items.push(messageToRest(method.output, m, writeOpts));
    writeJson(res, 200, items, echoedHeaders(response.header));
    return;
  }

  if (opts.lane === undefined) {
    const response = await opts.transport.unary(
      method as DescMethodUnary,
      signal(),
      undefined,
      header,
      request,
      arrival.values,
    );
    await writeUnary(req, res, route, response, writeOpts, constants);
    return;
  }
  // The request message goes to the interceptors and the handler in process
  // and the answer comes back the same way: nothing is encoded and parsed again.
  const response = await opts.lane.call(laneCall(method as DescMethodUnary));
  await writeUnary(req, res, route, response, writeOpts, constants);
}

async function writeUnary(
  req: AnyRequest,
  res: AnyResponse,
  route: Route,
  response: { readonly header: Headers; readonly message: Message },
  writeOpts: FlatWriteOptions,
  constants: ConstantCache,
): Promise<void> {
  const { method } = route;
  const extra = echoedHeaders(response.header);
  // The call ran (every interceptor, auth included); only its serialisation is kept.
  const cached = constants.get(route);
  if (cached !== undefined) return sendConstant(req, res, cached, extra);
  if (method.output.typeName === HTTP_BODY) {
    await writeHttpBodyStream(res, createAsyncIterable([response.message as HttpBody]), extra);
    return;
  }
  const field = route.responseBody === "" ? undefined : method.output.fields.find((f) => f.name === route.responseBody);
  const json = field
    ? (fieldToRest(field, response.message, writeOpts) ?? null)
    : messageToRest(method.output, response.message, writeOpts);
  if (route.verb === "GET" && isConstantOperation(method)) {
    const doc = constantDocument(JSON.stringify(json));
    constants.set(route, doc);
    return sendConstant(req, res, doc, extra);
  }
  writeJson(res, 200, json, extra);
}

/** What the gateway reads of a request's target. */
interface RequestTarget {
  /** Still percent-encoded, as sent. */
  readonly pathname: string;
  readonly searchParams: URLSearchParams;
  readonly href: string;
}

/** Letters, digits, "_", "-" and "/" only: a target the URL parser hands back unchanged. */
const PLAIN_TARGET = /^\/[A-Za-z0-9_/-]*$/;

/** The request target parsed, or undefined when it is not a URL path. */
export function requestTarget(raw: string | undefined): RequestTarget | undefined {
  // Most requests (every POST of the API) need no parse: nothing to normalise, no query.
  if (raw !== undefined && PLAIN_TARGET.test(raw))
    return { pathname: raw, searchParams: new URLSearchParams(), href: `http://rest.invalid${raw}` };
  try {
    // Prefixing (not resolving) keeps "//x" a path instead of a host.
    return new URL(`http://rest.invalid${raw?.startsWith("/") ? raw : "/"}`);
  } catch {
    return undefined;
  }
}

/** A request target already answered from the constant cache: its route and its (empty) request message. */
interface KnownTarget {
  readonly route: Route;
  readonly request: Message;
}

/**
 * What the gateway resolved of a request, at the front door (arrival.ts):
 * its target, parsed once, and its route with the path's bindings; or, for
 * a target the constant cache has answered before, that answer's route.
 */
class RestResolution implements Resolution {
  readonly rpcPath = false;
  readonly method: DescMethod | undefined;
  constructor(
    readonly url: RequestTarget | undefined,
    readonly match: RouteMatch | undefined,
    readonly known: KnownTarget | undefined,
  ) {
    this.method = known?.route.method ?? (match?.kind === "found" ? match.route.method : undefined);
  }
}

/** A REST request's resolution: from the constant cache, or its target parsed and matched against the table. */
function resolveRest(
  table: RouteTable,
  constantTargets: ReadonlyMap<string, KnownTarget> | undefined,
  verb: string,
  rawUrl: string | undefined,
): RestResolution {
  const known = verb === "GET" ? constantTargets?.get(rawUrl ?? "") : undefined;
  if (known !== undefined) return new RestResolution(undefined, undefined, known);
  const url = requestTarget(rawUrl);
  // The raw path, still percent-encoded: URL keeps the encoding as sent.
  return new RestResolution(url, url === undefined ? undefined : findRoute(table, verb, url.pathname), undefined);
}

/** The REST gateway: answers a request, and resolves what one reaches (for the front door, which does it once). */
export interface RestHandler {
  /**
   * Answers a REST request and resolves true, or resolves false when no REST
   * path matches. `arrival`: what the front door made of the request
   * (src/http/arrival.ts), with its resolution when the door made it through
   * `resolve`; made here when the gateway is served without a door.
   */
  (req: AnyRequest, res: AnyResponse, arrival?: Arrival): Promise<boolean>;
  /** What a request reaches on the REST surface: its route, matched once, which the handler then uses. */
  resolve(verb: string, req: AnyRequest): Resolution;
}

export function createRestHandler(opts: RestOptions): RestHandler {
  const table = buildRouteTable(opts.revisions);
  const constants: ConstantCache = new Map();
  // Request targets (exactly as sent, no query) already answered from the
  // cache: the next GET of one skips the URL parse, route match and decode.
  const constantTargets = new Map<string, KnownTarget>();
  const cacheTargets = opts.authorize === undefined ? undefined : constantTargets;
  const handler = async (req: AnyRequest, res: AnyResponse, arrival = arrive(req)): Promise<boolean> => {
    const verb = (req.method ?? "GET").toUpperCase();
    const resolved =
      arrival.resolution instanceof RestResolution
        ? arrival.resolution
        : resolveRest(table, cacheTargets, verb, req.url);
    const { known, url, match } = resolved;
    if (known !== undefined) {
      try {
        // Awaited only when the credentials are checked asynchronously.
        const pending = sendCachedConstant(
          opts,
          known.route.method,
          known.request,
          constants.get(known.route)!,
          req,
          res,
          arrival,
        );
        if (pending !== undefined) await pending;
      } catch (err) {
        if (!isGone(res)) writeRestError(res, err);
      }
      return true;
    }
    if (url === undefined || match === undefined) return false;
    const rawPath = url.pathname;
    if (match.kind === "none") {
      const underRevision = table.prefixes.some((p) => rawPath === p || rawPath.startsWith(`${p}/`));
      if (!underRevision) return false;
      writeRestError(res, notFound(`no operation ${verb} ${rawPath}`, "NO_OPERATION"));
      return true;
    }
    if (match.kind === "wrong-method") {
      methodNotAllowed(res, verb, rawPath, match.allowed);
      return true;
    }
    try {
      await serve(opts, constants, match.route, req, res, url, match.bindings, arrival);
      // Bounded: a client cannot grow it by spelling one path many ways.
      if (
        verb === "GET" &&
        constants.has(match.route) &&
        req.url !== undefined &&
        !req.url.includes("?") &&
        constantTargets.size < 64
      ) {
        constantTargets.set(req.url, { route: match.route, request: create<DescMessage>(match.route.method.input) });
      }
    } catch (err) {
      // A client that went away needs no answer.
      if (isGone(res)) return true;
      const closeAfter = err instanceof ConnectError && req.httpVersionMajor === 1 && !req.complete;
      writeRestError(res, err, closeAfter ? { connection: "close" } : undefined);
    }
    return true;
  };
  return Object.assign(handler, {
    resolve: (verb: string, req: AnyRequest): Resolution => resolveRest(table, cacheTargets, verb, req.url),
  });
}
