// connect-es answers a protobuf binary body it cannot parse with `internal`
// (HTTP 500), before any interceptor runs. API.md wants malformed input to
// be invalid_argument. This guard sits between the Node adapter and the
// router's handlers: it parses uncompressed binary bodies once, and when a
// message does not parse it hands the router an empty message instead and
// marks the call, so the call interceptor answers invalid_argument in
// whichever protocol the client speaks.
import { fromBinary, type DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, createConnectRouter, createContextKey, createContextValues } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip, universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { ConnectNodeAdapterOptions } from "@connectrpc/connect-node";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { UniversalHandler, UniversalServerRequest } from "@connectrpc/connect/protocol";

/** Set on a call whose body was not a valid protobuf message of the method's input type. */
export const malformedBinaryBody = createContextKey<boolean>(false, { description: "malformed binary body" });

const UNARY_BINARY = /^application\/proto\b/i;
const ENVELOPED_BINARY = /^application\/(connect\+proto|grpc(-web)?(\+proto)?)\s*(;|$)/i;

function isCompressed(header: Headers): boolean {
  for (const name of ["content-encoding", "connect-content-encoding", "grpc-encoding"]) {
    const v = header.get(name);
    if (v !== null && v.toLowerCase() !== "identity") return true;
  }
  return false;
}

function parses(method: DescMethod, bytes: Uint8Array): boolean {
  try {
    fromBinary(method.input, bytes);
    return true;
  } catch {
    return false;
  }
}

/** Whether every complete, uncompressed envelope holds a message that parses (framing errors are left to connect). */
function envelopesParse(method: DescMethod, body: Uint8Array): boolean {
  let at = 0;
  while (at + 5 <= body.length) {
    const flags = body[at] as number;
    const len = new DataView(body.buffer, body.byteOffset + at + 1, 4).getUint32(0);
    if (at + 5 + len > body.length) return true;
    // Compressed or end-of-stream envelopes are not messages of ours.
    if (flags === 0 && !parses(method, body.subarray(at + 5, at + 5 + len))) return false;
    at += 5 + len;
  }
  return true;
}

async function* replay(chunks: Uint8Array[], rest?: AsyncIterator<Uint8Array>): AsyncIterable<Uint8Array> {
  yield* chunks;
  if (rest === undefined) return;
  for (;;) {
    const r = await rest.next();
    if (r.done === true) return;
    yield r.value;
  }
}

export function guardBinaryBodies(handler: UniversalHandler, maxBytes: number): UniversalHandler {
  const method = handler.method as DescMethod;
  const guarded = async (req: UniversalServerRequest) => {
    const type = req.header.get("content-type") ?? "";
    const unary = UNARY_BINARY.test(type);
    if ((!unary && !ENVELOPED_BINARY.test(type)) || isCompressed(req.header) || !(typeof req.body === "object" && req.body !== null && Symbol.asyncIterator in req.body)) {
      return handler(req);
    }
    const it = (req.body as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
    const chunks: Uint8Array[] = [];
    let size = 0;
    for (;;) {
      const r = await it.next();
      if (r.done === true) break;
      chunks.push(r.value);
      size += r.value.byteLength;
      // Over the limit: let connect answer resource_exhausted as usual.
      if (size > maxBytes + 5) return handler({ ...req, body: replay(chunks, it) });
    }
    const body = Buffer.concat(chunks, size);
    const ok = unary ? parses(method, body) : envelopesParse(method, body);
    if (ok) return handler({ ...req, body: replay([body]) });
    const contextValues = req.contextValues ?? createContextValues();
    contextValues.set(malformedBinaryBody, true);
    // An empty message parses; the call interceptor refuses the call before any handler runs.
    const empty = unary ? new Uint8Array(0) : new Uint8Array(5);
    const header = new Headers(req.header);
    if (header.has("content-length")) header.set("content-length", String(empty.length));
    return handler({ ...req, header, body: replay([empty]), contextValues });
  };
  return Object.assign(guarded, {
    service: handler.service,
    method: handler.method,
    requestPath: handler.requestPath,
    protocolNames: handler.protocolNames,
    allowedMethods: handler.allowedMethods,
    supportedContentType: handler.supportedContentType,
  });
}

type NodeHandler = (req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse) => void;

/**
 * connect-node's connectNodeAdapter, with every handler behind the guard.
 * (The adapter itself offers no hook between body and parse.)
 */
export function guardedNodeAdapter(options: ConnectNodeAdapterOptions & { readMaxBytes: number }): NodeHandler {
  const router = createConnectRouter({ acceptCompression: [compressionGzip, compressionBrotli], ...options });
  options.routes(router);
  const paths = new Map<string, UniversalHandler>();
  for (const h of router.handlers) paths.set(h.requestPath, guardBinaryBodies(h, options.readMaxBytes));
  return (req, res) => {
    const handler = paths.get(req.url?.split("?", 2)[0] ?? "");
    if (handler === undefined) {
      (options.fallback as NodeHandler | undefined)?.(req, res);
      return;
    }
    const uReq = universalRequestFromNodeRequest(req, res, undefined, options.contextValues?.(req));
    handler(uReq)
      .then((uRes) => universalResponseToNodeResponse(uRes, res))
      .catch((reason: unknown) => {
        // A client that went away aborts the write; anything else has no one left to tell.
        if (ConnectError.from(reason).code !== Code.Aborted && !res.headersSent) {
          res.writeHead(500);
          res.end();
        }
      });
  };
}
