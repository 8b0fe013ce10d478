// The call interceptor, which runs for every call over every protocol (the
// REST gateway calls through the same lane). It gives each call its request
// id, makes sure no internal detail (stack, SQL, file path) reaches a client,
// and writes the call's outcome once: its metrics and its log line, through
// `createCallEnd`, the one writer of both, which a call answered without the
// interceptors (refused at the front door, a cached constant document) ends
// through too (pipeline.ts, `answeredWithout`).
import { Code, createContextKey, type ConnectError, type Interceptor } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { internal, invalidArgument, withReason } from "../errors.js";
import { malformedBodyReason, parsedBody } from "./body-marks.js";
import { onResponseEnd } from "./response-end.js";
import type { Logger } from "../log.js";
import { toServiceError } from "../store/index.js";
import { traceIdKey } from "../tracing/index.js";
import { arrivalKey, REQUEST_ID, requestIdOf, type CallRecord } from "../http/arrival.js";

/**
 * The call's request id, set by the call interceptor for the interceptors
 * inside it (the audit): its arrival's (src/http/arrival.ts), or, for a call
 * the process makes itself, the x-request-id it carries or a fresh one.
 */
export const requestIdKey = createContextKey<string | undefined>(undefined, { description: "the call's request id" });

/** Puts a call's outcome on its request's record; false when there is none (or it is closed) and the call logs its own line. */
function recordOnRequest(
  record: CallRecord | undefined,
  rpc: string,
  code: string,
  traceId: string | undefined,
): boolean {
  if (record === undefined || record.closed) return false;
  record.rpc = rpc;
  record.code = code;
  if (traceId !== undefined) record.traceId = traceId;
  return true;
}

/**
 * A call's outcome: on its REST request's record when there is one (the
 * request's line carries it), else a `call` line of its own. Every call
 * logs through here, whether the interceptors ran or not (app.ts).
 */
export function logCall(
  log: Logger,
  record: CallRecord | undefined,
  requestId: string,
  rpc: string,
  code: string,
  ms: number,
  traceId?: string,
): void {
  if (recordOnRequest(record, rpc, code, traceId)) return;
  const durationMs = Math.round(ms * 1000) / 1000;
  // Two literals rather than a spread: this runs for every call.
  if (traceId === undefined) log.info({ request_id: requestId, rpc, code, duration_ms: durationMs }, "call");
  else log.info({ request_id: requestId, trace_id: traceId, rpc, code, duration_ms: durationMs }, "call");
}

/** Where a call's outcome is counted and timed (metrics.ts): by route (/package.Service/Method) and code (not_found). */
export type RecordMetrics = (route: string, code: string, seconds: number) => void;

/** The end of a call: what it was, how it ended (undefined: ok), and when it started (process.hrtime.bigint()). */
export interface CallEnd {
  readonly rpc: string;
  readonly code: Code | undefined;
  readonly started: bigint;
  readonly requestId: string;
  readonly record: CallRecord | undefined;
  readonly traceId: string | undefined;
}

/**
 * The one writer of a call's outcome: its metrics (the code as connect
 * spells it, `not_found`) and its log line (`NotFound`), both timed from
 * `started`. The call interceptor ends every call that reached it here, and
 * the pipeline every call answered without it.
 */
export function createCallEnd(log: Logger, metrics: RecordMetrics): (end: CallEnd) => void {
  return (end) => {
    const seconds = Number(process.hrtime.bigint() - end.started) / 1e9;
    const ok = end.code === undefined;
    metrics(`/${end.rpc}`, ok ? "ok" : codeToString(end.code), seconds);
    logCall(log, end.record, end.requestId, end.rpc, ok ? "ok" : Code[end.code], seconds * 1000, end.traceId);
  };
}

/** Codes whose messages we wrote ourselves for the client. */
function isClientFacing(err: ConnectError): boolean {
  return err.code !== Code.Internal && err.code !== Code.Unknown && err.code !== Code.DataLoss;
}

/**
 * The one place a handler's failure becomes what the client sees: database
 * failures get their codes (outage -> unavailable, conflict ->
 * failed_precondition), client-facing ConnectErrors pass, and anything else
 * is logged and answered with a bare "internal error".
 */
function sanitize(err: unknown, log: Logger, ctx: Record<string, unknown>): ConnectError {
  const mapped = toServiceError(err);
  // Errors the framework or a library raised get their code's generic reason.
  if (isClientFacing(mapped)) return withReason(mapped);
  log.error({ ...ctx, err }, "call failed with an internal error");
  return internal();
}

export function createCallInterceptor(log: Logger, endCall: (end: CallEnd) => void): Interceptor {
  return (next) => async (req) => {
    const started = process.hrtime.bigint();
    const arrival = req.contextValues.get(arrivalKey);
    const requestId = arrival?.requestId ?? requestIdOf(req.header.get(REQUEST_ID));
    // The interceptors inside (the audit) name the call by the same id.
    req.contextValues.set(requestIdKey, requestId);
    const rpc = `${req.service.typeName}/${req.method.name}`;
    const done = (code: Code | undefined): void =>
      endCall({
        rpc,
        code,
        started,
        requestId,
        record: arrival?.record,
        // Set by the tracing interceptor (outside this one) when tracing is on.
        traceId: req.contextValues.get(traceIdKey),
      });
    try {
      const undecoded = req.contextValues.get(malformedBodyReason);
      if (undecoded !== undefined) throw invalidArgument(undecoded.message, undecoded.reason);
      // A unary body the binary guard parsed already (the router parsed an empty one).
      const parsed = req.stream ? undefined : req.contextValues.get(parsedBody);
      const res = await next(parsed === undefined || req.stream ? req : { ...req, message: parsed });
      res.header.set(REQUEST_ID, requestId);
      return onResponseEnd(
        res,
        () => done(undefined),
        (err) => {
          const safe = sanitize(err, log, { request_id: requestId, rpc });
          done(safe.code);
          return safe;
        },
      );
    } catch (err) {
      const safe = sanitize(err, log, { request_id: requestId, rpc });
      safe.metadata.set(REQUEST_ID, requestId);
      done(safe.code);
      throw safe;
    }
  };
}
