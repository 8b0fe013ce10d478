// Serves the explorer (docs/contract/15-browsers.md): `GET /` redirects to `/ui/`, and
// `/ui/...` serves the files that `npm run build` bundles into dist/ui.
// Loading needs no credentials (the page asks for a token when an API call
// answers 401). Hashed asset names never change content: cached for a year,
// immutable. index.html (and any unhashed file) is revalidated every time
// through an ETag, so a new build shows at the next load. Every file goes
// out as the constant documents do (http/constant-document.ts): gzipped for
// a browser when that saves a tenth (the script: 149 KB -> 45 KB).
import { existsSync } from "node:fs";
import { readFile, readdir } from "node:fs/promises";
import { dirname, extname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { RequestHandler } from "./server.js";
import { internal, notFound } from "./errors.js";
import { constantDocument, sendConstant, type ConstantDocument } from "./http/constant-document.js";
import { writeRestError } from "./http/error-status.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".map": "application/json",
};

/** Names esbuild writes with a content hash: `main-ABCD1234.js`. */
const HASHED = /-[A-Z0-9]{8,}\.[a-z]+$/;

/** A file of the build: sent like the constant documents (ETag, 304, gzip when accepted). */
interface Asset {
  readonly doc: ConstantDocument;
  readonly immutable: boolean;
}

/** dist/ui under the package root (the folder holding package.json), from src/ (tsx) or dist/src/ (built). */
export function defaultUiDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    if (existsSync(join(dir, "package.json"))) return join(dir, "dist", "ui");
    dir = dirname(dir);
  }
  return join(dirname(fileURLToPath(import.meta.url)), "..", "ui");
}

async function loadAssets(dir: string): Promise<Map<string, Asset> | undefined> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return undefined;
  }
  const assets = new Map<string, Asset>();
  for (const name of names) {
    const type = TYPES[extname(name)];
    if (type === undefined) continue;
    assets.set(name, { doc: constantDocument(await readFile(join(dir, name)), type), immutable: HASHED.test(name) });
  }
  return assets.has("index.html") ? assets : undefined;
}

function send(res: Res, status: number, headers: Record<string, string | number>, body?: Buffer | string): void {
  res.writeHead(status, headers);
  if (body === undefined) res.end();
  else res.end(body);
}

/**
 * Wraps `next`: the explorer's paths are answered here, everything else goes on.
 * The files are read once, on the first request (a build while running needs a restart).
 */
export function withUi(dir: string, next: RequestHandler): RequestHandler {
  let assets: Promise<Map<string, Asset> | undefined> | undefined;
  const serve = async (req: Req, res: Res, path: string): Promise<void> => {
    assets ??= loadAssets(dir);
    const files = await assets;
    if (files === undefined) {
      return writeRestError(res, notFound("the explorer is not built: run `npm run build`"));
    }
    const name = path === "/ui/" ? "index.html" : path.slice("/ui/".length);
    const asset = files.get(name);
    if (asset === undefined) {
      return writeRestError(res, notFound(`no explorer file ${name.slice(0, 100)}`));
    }
    sendConstant(req, res, asset.doc, {
      "cache-control": asset.immutable ? "public, max-age=31536000, immutable" : "no-cache",
      "x-content-type-options": "nosniff",
      ...(name === "index.html"
        ? {
            "content-security-policy":
              "default-src 'self'; connect-src 'self' http: https:; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'",
          }
        : {}),
    });
  };
  return (req, res) => {
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    const read = req.method === "GET" || req.method === "HEAD";
    if (read && path === "/") {
      const query = (req.url ?? "/").slice(1);
      return send(res, 302, { location: `/ui/${query}`, "content-length": 0 });
    }
    if (read && path === "/ui") return send(res, 302, { location: "/ui/", "content-length": 0 });
    if (read && path.startsWith("/ui/")) {
      // writeRestError breaks the transfer once headers went out.
      serve(req, res, path).catch((err: unknown) => writeRestError(res, internal(err)));
      return;
    }
    next(req, res);
  };
}
