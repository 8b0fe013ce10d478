// CORS (docs/contract/15-browsers.md) at the HTTP layer, in front of every route:
// Connect, gRPC-Web, REST, /events and whatever is added later. The header
// lists are the ones @connectrpc/connect publishes for its protocols, plus
// the two of this service (authorization, x-request-id). Unset
// CORS_ORIGINS = no CORS headers at all: the handler is returned as it is.
import { cors } from "@connectrpc/connect";
import type { RequestHandler } from "./server.js";
import { REQUEST_ID } from "./http/arrival.js";
import { addVary } from "./http/headers.js";
import { ConfigError } from "./config.js";

/** Browsers cap the preflight cache (Chromium at 2 hours); longer is pointless. */
const CORS_MAX_AGE_SECONDS = 7200;

const CORS_ALLOWED_METHODS: readonly string[] = [...new Set([...cors.allowedMethods, "GET", "POST"])];
const CORS_ALLOWED_HEADERS: readonly string[] = [
  ...new Set([...cors.allowedHeaders, "authorization", REQUEST_ID].map((h) => h.toLowerCase())),
];
const CORS_EXPOSED_HEADERS: readonly string[] = [
  ...new Set([...cors.exposedHeaders, REQUEST_ID].map((h) => h.toLowerCase())),
];

/**
 * CORS_ORIGINS=* with authentication off would let a page on any site read
 * and write the store through a visitor's browser: refused at start-up
 * (docs/contract/16-limits.md).
 */
export function assertCorsSafe(origins: readonly string[] | "*" | undefined, authEnabled: boolean): void {
  if (origins === "*" && !authEnabled) {
    throw new ConfigError(
      "CORS_ORIGINS",
      'is "*", but authentication is off: any web page could then call the service from a visitor\'s browser; list the origins, or turn authentication on',
    );
  }
}

export function withCors(origins: readonly string[] | "*" | undefined, next: RequestHandler): RequestHandler {
  if (origins === undefined) return next;
  const allowed = (origin: string): boolean => origins === "*" || origins.includes(origin);
  return (req, res) => {
    const originHeader = req.headers.origin;
    const origin = typeof originHeader === "string" ? originHeader : undefined;
    // The answer depends on Origin whenever CORS is on, also for caches.
    res.setHeader("vary", addVary(res.getHeader("vary"), "Origin"));
    const preflight =
      req.method === "OPTIONS" && origin !== undefined && req.headers["access-control-request-method"] !== undefined;
    if (origin !== undefined && allowed(origin)) {
      res.setHeader("access-control-allow-origin", origin);
      if (!preflight) res.setHeader("access-control-expose-headers", CORS_EXPOSED_HEADERS.join(", "));
    }
    if (!preflight) {
      next(req, res);
      return;
    }
    // A preflight never reaches a route. Only a listed origin learns what
    // it may send; for any other the browser finds no allow-origin and stops.
    if (origin !== undefined && allowed(origin)) {
      res.setHeader("access-control-allow-methods", CORS_ALLOWED_METHODS.join(", "));
      res.setHeader("access-control-allow-headers", CORS_ALLOWED_HEADERS.join(", "));
      res.setHeader("access-control-max-age", String(CORS_MAX_AGE_SECONDS));
      res.setHeader(
        "vary",
        addVary(addVary(res.getHeader("vary"), "Access-Control-Request-Method"), "Access-Control-Request-Headers"),
      );
    }
    res.writeHead(204);
    res.end();
  };
}
