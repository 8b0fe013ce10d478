// Answers that cannot change while the process runs (the JSON Schemas, the
// S3 settings, the OpenAPI document): serialised once, sent from memory with
// a strong ETag, and `304 Not Modified` when the client already holds them.
// `cache-control: no-cache` makes clients revalidate (cheaply) every time, so
// a new deployment's document is picked up at once.
import { createHash } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { DescMethod } from "@bufbuild/protobuf";

/**
 * The one place that says which operations answer the same bytes for the life
 * of the process (per service and method name, in every revision). Only
 * parameterless GETs belong here.
 */
const CONSTANT_OPERATIONS: ReadonlySet<string> = new Set(["SchemaService.Schemas", "StorageService.Config"]);

export function isConstantOperation(method: DescMethod): boolean {
  return CONSTANT_OPERATIONS.has(`${method.parent.name}.${method.name}`);
}

export interface ConstantDocument {
  readonly body: Buffer;
  readonly etag: string;
  readonly contentType: string;
}

export function constantDocument(text: string, contentType = "application/json"): ConstantDocument {
  const body = Buffer.from(text);
  const etag = `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"`;
  return { body, etag, contentType };
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

/** Sends the document, or 304 when the request's If-None-Match already names it. */
export function sendConstant(
  req: IncomingMessage | Http2ServerRequest,
  res: ServerResponse | Http2ServerResponse,
  doc: ConstantDocument,
  extraHeaders: Record<string, string> = {},
): void {
  const headers = { etag: doc.etag, "cache-control": "no-cache", ...extraHeaders };
  if (matchesEtag(req.headers["if-none-match"], doc.etag)) {
    (res as ServerResponse).writeHead(304, headers);
    res.end();
    return;
  }
  (res as ServerResponse).writeHead(200, { ...headers, "content-type": doc.contentType, "content-length": doc.body.length });
  res.end(doc.body);
}
