// Interceptors that run for every call, over every protocol (the REST
// gateway calls through the same router). They give each call a request id,
// log its outcome without payloads, and make sure no internal detail (stack,
// SQL, file path) reaches a client.
import { randomUUID } from "node:crypto";
import { Code, type ConnectError, type Interceptor } from "@connectrpc/connect";
import { internal, invalidArgument, withReason } from "../errors.js";
import { malformedBinaryBody, parsedBinaryBody } from "./binary-guard.js";
import { onResponseEnd } from "./response-end.js";
import type { Logger } from "../log.js";
import { toServiceError } from "../store/index.js";

export const REQUEST_ID = "x-request-id";
const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The client's request id when it is safe to log and echo, else a fresh one. */
export function requestIdOf(incoming: string | null | undefined): string {
  return incoming !== null && incoming !== undefined && SAFE_ID.test(incoming) ? incoming : randomUUID();
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

export function createCallInterceptor(log: Logger): Interceptor {
  return (next) => async (req) => {
    const requestId = requestIdOf(req.header.get(REQUEST_ID));
    const ctx = { request_id: requestId, rpc: `${req.service.typeName}/${req.method.name}` };
    const started = process.hrtime.bigint();
    const done = (code: string): void => {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      log.info({ ...ctx, code, duration_ms: Math.round(ms * 1000) / 1000 }, "call");
    };
    try {
      if (req.contextValues.get(malformedBinaryBody)) {
        throw invalidArgument(`the request body is not a valid ${req.method.input.typeName} message`, "MALFORMED_BODY");
      }
      // A unary body the binary guard parsed already (the router parsed an empty one).
      const parsed = req.stream ? undefined : req.contextValues.get(parsedBinaryBody);
      const res = await next(parsed === undefined || req.stream ? req : { ...req, message: parsed });
      res.header.set(REQUEST_ID, requestId);
      return onResponseEnd(
        res,
        () => done("ok"),
        (err) => {
          const safe = sanitize(err, log, ctx);
          done(Code[safe.code]);
          return safe;
        },
      );
    } catch (err) {
      const safe = sanitize(err, log, ctx);
      safe.metadata.set(REQUEST_ID, requestId);
      done(Code[safe.code]);
      throw safe;
    }
  };
}
