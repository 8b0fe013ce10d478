// The paths that are not operations of the API: `GET /healthz` (the process
// is up), `GET /readyz` (the database answers too), `GET /metrics` (the
// Prometheus text) and `GET /openapi.json` (the REST surface, built from the
// descriptors on first request, then sent from memory with its ETag). None
// needs credentials (README, "Configuration").
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { constantDocument, sendConstant, type ConstantDocument } from "./http/constant-document.js";
import type { Metrics } from "./metrics.js";
import { revisions } from "./rpc/index.js";
import { buildOpenApi } from "./schema/openapi.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

export interface OpsRoutesDeps {
  readonly metrics: Pick<Metrics, "render" | "contentType">;
  /** Whether the database answers. */
  readonly ready: () => Promise<boolean>;
}

/** Answers one of the four paths and resolves true; resolves false, having touched nothing, for any other request. */
export type OpsRoutes = (req: Req, res: Res) => Promise<boolean>;

function sendJson(res: Res, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

export function createOpsRoutes(deps: OpsRoutesDeps): OpsRoutes {
  let openApiDoc: ConstantDocument | undefined;
  const openApi = (): ConstantDocument => (openApiDoc ??= constantDocument(JSON.stringify(buildOpenApi(revisions))));
  return async (req, res) => {
    if (req.method !== "GET") return false;
    const path = (req.url ?? "/").split("?")[0];
    switch (path) {
      case "/healthz":
        sendJson(res, 200, { status: "ok" });
        return true;
      case "/openapi.json":
        sendConstant(req, res, openApi());
        return true;
      case "/metrics": {
        const text = await deps.metrics.render();
        res.writeHead(200, { "content-type": deps.metrics.contentType, "content-length": Buffer.byteLength(text) });
        res.end(text);
        return true;
      }
      case "/readyz": {
        const ok = await deps.ready();
        sendJson(res, ok ? 200 : 503, { status: ok ? "ok" : "unavailable" });
        return true;
      }
      default:
        return false;
    }
  };
}
