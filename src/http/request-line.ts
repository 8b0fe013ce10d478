// The one log line of a request that is not an RPC path (REST, the ops
// routes, a 404, or any request refused at the front door): a `call` line
// when the request was a call (its rpc and code, from its record, beside
// the HTTP fields), else an `http` line. Written here only, for the
// requests the fallback answers (http-fallback.ts) and those the front door
// refuses (app.ts); a call on an RPC path writes its own `call` line
// (rpc/interceptors.ts, logCall).
import type { Logger } from "../log.js";
import type { Arrival } from "./arrival.js";

export interface RequestFields {
  /** The HTTP method. */
  readonly method: string | undefined;
  /** The request target as sent, without its query string (which may carry values). */
  readonly url: string | undefined;
  readonly status: number;
  /** The code of a refusal that is no call (a path no operation has), for its `http` line. */
  readonly code?: string;
}

/** Writes the request's line, timed from its arrival. */
export function logRequest(log: Logger, arrival: Arrival, fields: RequestFields): void {
  const durationMs = Math.round(Number(process.hrtime.bigint() - arrival.started) / 1e3) / 1e3;
  const url = fields.url ?? "/";
  const query = url.indexOf("?");
  const path = (query === -1 ? url : url.slice(0, query)).slice(0, 200);
  const record = arrival.record;
  const rpc = record?.rpc;
  const { requestId: request_id } = arrival;
  const { method, status } = fields;
  // Written out in full, not spread: this runs for every request (docs/benchmarks/load.md, "Throughput under load").
  if (rpc !== undefined && record?.traceId === undefined)
    log.info({ request_id, rpc, code: record?.code, method, path, status, duration_ms: durationMs }, "call");
  else if (rpc !== undefined)
    log.info(
      { request_id, trace_id: record?.traceId, rpc, code: record?.code, method, path, status, duration_ms: durationMs },
      "call",
    );
  else if (fields.code !== undefined)
    log.info({ request_id, method, path, status, code: fields.code, duration_ms: durationMs }, "http");
  else log.info({ request_id, method, path, status, duration_ms: durationMs }, "http");
}
