// The REST gateway: match a route, build the request message, call the
// method through the transport (so every interceptor runs), write REST JSON.
import type { ServerResponse } from "node:http";
import type { Http2ServerResponse } from "node:http2";
import type { DescMessage, DescMethodServerStreaming, DescMethodUnary, MessageShape } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import type { Transport } from "@connectrpc/connect";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import { notFound } from "../errors.js";
import type { HttpBody } from "../../gen/google/api/httpbody_pb.js";
import { parseJsonBody, readBody } from "./body-reader.js";
import type { AnyRequest } from "./body-reader.js";
import type { FlatWriteOptions } from "./flat-codec.js";
import { writeHttpBodyStream } from "./http-body-stream.js";
import { decodeRestRequest } from "./request-decoder.js";
import { fieldToRest, messageToRest } from "./response-encoder.js";
import { buildRouteTable, findRoute } from "./routes.js";
import type { RestRevision, Route } from "./routes.js";
import { writeJson, writeRestError } from "./status.js";

type AnyResponse = ServerResponse | Http2ServerResponse;

export interface RestOptions {
  /** In order; the last revision that has an operation serves its unprefixed path. */
  readonly revisions: readonly RestRevision[];
  /** Where calls go: an in-process router transport with the server's interceptors. */
  readonly transport: Transport;
  /** A larger body is 413 resource_exhausted and nothing runs. */
  readonly maxBodyBytes: number;
}

const HTTP_BODY = "google.api.HttpBody";

/** The request headers the interceptors care about: credentials and x-* (request ids, tracing). */
function forwardedHeaders(req: AnyRequest): Headers {
  const out = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || name.startsWith(":")) continue;
    if (name !== "authorization" && !name.startsWith("x-")) continue;
    for (const v of Array.isArray(value) ? value : [value]) out.append(name, v);
  }
  return out;
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

function abortOnClose(res: AnyResponse): AbortSignal {
  const controller = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) controller.abort();
  });
  return controller.signal;
}

function methodNotAllowed(res: AnyResponse, verb: string, path: string, allowed: readonly string[]): void {
  writeJson(
    res,
    405,
    { code: "unimplemented", message: `${verb} is not allowed on ${path}; allowed: ${allowed.join(", ")}` },
    { allow: allowed.join(", ") },
  );
}

async function serve(opts: RestOptions, route: Route, req: AnyRequest, res: AnyResponse, url: URL, bindings: Parameters<typeof decodeRestRequest>[1]["bindings"]): Promise<void> {
  let body: unknown;
  if (route.body !== "") body = parseJsonBody(await readBody(req, opts.maxBodyBytes));
  const { method } = route;
  const request = decodeRestRequest(method.input, { bindings, query: url.searchParams, body, bodyField: route.body });
  const signal = abortOnClose(res);
  const header = forwardedHeaders(req);
  const writeOpts = writeOptionsFor(method.input, request);

  if (method.methodKind === "server_streaming") {
    const streaming = method as DescMethodServerStreaming;
    const response = await opts.transport.stream(streaming, signal, undefined, header, createAsyncIterable([request]));
    if (method.output.typeName === HTTP_BODY) {
      await writeHttpBodyStream(res, response.message as AsyncIterable<HttpBody>, echoedHeaders(response.header));
      return;
    }
    // Other streams have no REST shape of their own: one JSON array.
    const items = [];
    for await (const m of response.message) items.push(messageToRest(method.output, m, writeOpts));
    writeJson(res, 200, items, echoedHeaders(response.header));
    return;
  }

  const unary = method as DescMethodUnary;
  const response = await opts.transport.unary(unary, signal, undefined, header, request);
  const extra = echoedHeaders(response.header);
  if (method.output.typeName === HTTP_BODY) {
    await writeHttpBodyStream(res, createAsyncIterable([response.message as HttpBody]), extra);
    return;
  }
  const field = route.responseBody === "" ? undefined : method.output.fields.find((f) => f.name === route.responseBody);
  const json = field ? (fieldToRest(field, response.message, writeOpts) ?? null) : messageToRest(method.output, response.message, writeOpts);
  writeJson(res, 200, json, extra);
}

/** Returns a handler that answers a REST request and resolves true, or resolves false when no REST path matches. */
export function createRestHandler(opts: RestOptions): (req: AnyRequest, res: AnyResponse) => Promise<boolean> {
  const table = buildRouteTable(opts.revisions);
  return async (req, res) => {
    const verb = (req.method ?? "GET").toUpperCase();
    let url: URL;
    try {
      // Prefixing (not resolving) keeps "//x" a path instead of a host.
      url = new URL(`http://rest.invalid${req.url?.startsWith("/") ? req.url : "/"}`);
    } catch {
      return false;
    }
    // The raw path, still percent-encoded: URL keeps the encoding as sent.
    const rawPath = url.pathname;
    const match = findRoute(table, verb, rawPath);
    if (match.kind === "none") {
      const underRevision = table.prefixes.some((p) => rawPath === p || rawPath.startsWith(`${p}/`));
      if (!underRevision) return false;
      writeRestError(res, notFound(`no operation ${verb} ${rawPath}`));
      return true;
    }
    if (match.kind === "wrong-method") {
      methodNotAllowed(res, verb, rawPath, match.allowed);
      return true;
    }
    try {
      await serve(opts, match.route, req, res, url, match.bindings);
    } catch (err) {
      // A client that went away needs no answer.
      if (isGone(res)) return true;
      const closeAfter = err instanceof ConnectError && req.httpVersionMajor === 1 && !req.complete;
      writeRestError(res, err, closeAfter ? { connection: "close" } : undefined);
    }
    return true;
  };
}
