// Answers that cannot change while the process runs (the JSON Schemas, the
// S3 settings, the OpenAPI document, the explorer's files): serialised once,
// sent from memory with a strong ETag, and `304 Not Modified` when the client
// already holds them.
// `cache-control: no-cache` makes clients revalidate (cheaply) every time, so
// a new deployment's document is picked up at once. A document worth
// compressing is also kept gzipped, for the clients that accept it (browsers
// and fetch() always do): the OpenAPI document goes from 107 KB to 6 KB.
import { createHash } from "node:crypto";
import { constants as zlib, gzipSync } from "node:zlib";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { DescMethod } from "@bufbuild/protobuf";
import { addVary } from "./headers.js";

/**
 * The one place that says which operations answer the same bytes for the life
 * of the process (per service and method name, in every revision). Only
 * parameterless GETs belong here.
 */
const CONSTANT_OPERATIONS: ReadonlySet<string> = new Set(["SchemaService.Schemas", "StorageService.Config"]);

export function isConstantOperation(method: DescMethod): boolean {
  return CONSTANT_OPERATIONS.has(`${method.parent.name}.${method.name}`);
}

/** One representation of a document: its bytes and its strong entity tag. */
interface Representation {
  readonly body: Buffer;
  readonly etag: string;
}

export interface ConstantDocument extends Representation {
  readonly contentType: string;
  /** The same document gzipped, when that saves enough to be worth it. */
  readonly gzip?: Representation;
}

/** Smaller documents go out as they are: a gzip header and a decoder cost more than they save. */
export const GZIP_MIN_BYTES = 1024;

export function constantDocument(content: string | Buffer, contentType = "application/json"): ConstantDocument {
  const body = typeof content === "string" ? Buffer.from(content) : content;
  const tag = createHash("sha256").update(body).digest("base64url").slice(0, 27);
  const doc = { body, etag: `"${tag}"`, contentType };
  if (body.length < GZIP_MIN_BYTES) return doc;
  const gzipped = gzipSync(body, { level: zlib.Z_BEST_COMPRESSION });
  // Each representation has its own strong tag (RFC 9110 8.8.3): a cache must not answer one for the other.
  return gzipped.length < body.length * 0.9 ? { ...doc, gzip: { body: gzipped, etag: `"${tag}-gzip"` } } : doc;
}

/** Whether an Accept-Encoding header admits gzip (listed, or by `*`, and not with q=0). */
export function acceptsGzip(header: string | string[] | undefined): boolean {
  if (header === undefined) return false;
  const text = Array.isArray(header) ? header.join(",") : header;
  let star = false;
  for (const item of text.split(",")) {
    const [name = "", ...params] = item.split(";").map((p) => p.trim().toLowerCase());
    const q = params.find((p) => p.startsWith("q="));
    const allowed = q === undefined || Number(q.slice(2)) > 0;
    if (name === "gzip" || name === "x-gzip") return allowed;
    if (name === "*") star = allowed;
  }
  return star;
}

/** Whether an If-None-Match header names this entity tag (weak comparison, as RFC 9110 asks for GET). */
export function matchesEtag(header: string | string[] | undefined, etag: string): boolean {
  if (header === undefined) return false;
  const text = Array.isArray(header) ? header.join(",") : header;
  return text.split(",").some((tag) => {
    const t = tag.trim();
    return t === "*" || t.replace(/^W\//, "") === etag;
  });
}

/**
 * Sends the document (gzipped when it has that form and the client accepts
 * it), or 304 when the request's If-None-Match already names the
 * representation it would get. A HEAD gets the headers only.
 */
export function sendConstant(
  req: IncomingMessage | Http2ServerRequest,
  res: ServerResponse | Http2ServerResponse,
  doc: ConstantDocument,
  extraHeaders?: Record<string, string>,
): void {
  const out = res as ServerResponse;
  let chosen: Representation = doc;
  if (doc.gzip !== undefined) {
    // The answer depends on Accept-Encoding whichever form is sent, also for caches.
    out.setHeader("vary", addVary(out.getHeader("vary"), "Accept-Encoding"));
    if (acceptsGzip(req.headers["accept-encoding"])) {
      chosen = doc.gzip;
      out.setHeader("content-encoding", "gzip");
    }
  }
  out.setHeader("etag", chosen.etag);
  out.setHeader("cache-control", "no-cache");
  if (extraHeaders !== undefined) for (const [name, value] of Object.entries(extraHeaders)) out.setHeader(name, value);
  const ifNoneMatch = req.headers["if-none-match"];
  if (ifNoneMatch !== undefined && matchesEtag(ifNoneMatch, chosen.etag)) {
    out.removeHeader("content-encoding");
    out.writeHead(304);
    res.end();
    return;
  }
  out.setHeader("content-type", doc.contentType);
  out.setHeader("content-length", chosen.body.length);
  out.writeHead(200);
  if (req.method === "HEAD") res.end();
  else res.end(chosen.body);
}
