// Every request the RPC adapter does not serve (its path is no
// /package.Service/Method): the REST gateway first, then the ops routes
// (ops-routes.ts), else 404 `NO_OPERATION`. Each such request answers with
// its arrival's request id (src/http/arrival.ts), also when the gateway
// refuses it (bad JSON, body too large), and has exactly one log line.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { notFound } from "./errors.js";
import { REQUEST_ID, type Arrival, type CallRecord } from "./http/arrival.js";
import { logRequest } from "./http/request-line.js";
import type { Logger } from "./log.js";
import type { OpsRoutes } from "./ops-routes.js";
import { writeRestError } from "./rest/index.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

export interface HttpFallbackDeps {
  readonly log: Logger;
  /** The REST gateway: resolves true when it answered the request. */
  readonly rest: (req: Req, res: Res, arrival: Arrival) => Promise<boolean>;
  readonly ops: OpsRoutes;
}

export function createHttpFallback(deps: HttpFallbackDeps): (req: Req, res: Res, arrival: Arrival) => void {
  const { log, rest, ops } = deps;
  return (req, res, arrival) => {
    // The request id of its arrival, which its call (through the gateway) logs by too.
    res.setHeader(REQUEST_ID, arrival.requestId);
    // One line per REST request: a `call` line when the request was a call
    // (its rpc and code, filled in by the call, beside the HTTP fields), else
    // an `http` line once the answer is sent. A call still running when its
    // client goes away writes its own line when it ends.
    const record: CallRecord = { closed: false };
    arrival.record = record;
    res.once("close", () => {
      record.closed = true;
      // A request its client left before the answer, with no call: no line.
      if (record.rpc === undefined && !res.writableFinished) return;
      logRequest(log, arrival, { method: req.method, url: req.url, status: res.statusCode });
    });
    void (async () => {
      try {
        if (await rest(req, res, arrival)) return;
        if (await ops(req, res)) return;
        const path = (req.url ?? "/").split("?")[0];
        writeRestError(res, notFound(`no route for ${req.method ?? "?"} ${path ?? "/"}`, "NO_OPERATION"));
      } catch (err) {
        log.error({ err }, "fallback failed");
        if (!res.headersSent) writeRestError(res, err);
        else res.destroy();
      }
    })();
  };
}
