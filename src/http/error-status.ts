// The one table from Connect codes to HTTP statuses (docs/errors.md), and
// the one writer of JSON error bodies: `{code, message, reason}`. It lives
// under http (below rest) because the front door answers refusals in the
// same shape before any REST code runs.
import type { Http2ServerResponse } from "node:http2";
import type { ServerResponse } from "node:http";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { entryOf, reasonOf } from "../errors.js";

/**
 * Connect code name -> HTTP status. The contract fixes invalid_argument,
 * failed_precondition (400, not Connect's 412 habit), resource_exhausted (413:
 * the only producer over REST is the body limit), and the rest follow the
 * Connect protocol's mapping.
 */
export const restStatus: Readonly<Record<string, number>> = Object.freeze({
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 413,
  failed_precondition: 400,
  aborted: 409,
  out_of_range: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  data_loss: 500,
  unauthenticated: 401,
});

// Codes whose messages may carry internals (a thrown Error's text becomes
// the message of an `unknown` error on the way through the router).
const opaqueCodes: ReadonlySet<Code> = new Set([Code.Internal, Code.Unknown, Code.DataLoss]);

export interface RestErrorBody {
  readonly code: string;
  readonly message: string;
  /** The catalogue reason (src/errors.ts), UPPER_SNAKE. */
  readonly reason: string;
}

/** The status and body a REST client sees for any thrown value. */
export function restErrorOf(err: unknown): { status: number; body: RestErrorBody } {
  if (err instanceof ConnectError && !opaqueCodes.has(err.code)) {
    const code = codeToString(err.code);
    const status = entryOf(err)?.httpStatus ?? restStatus[code] ?? 500;
    return { status, body: { code, message: err.rawMessage, reason: reasonOf(err) } };
  }
  return { status: 500, body: { code: "internal", message: "internal error", reason: "INTERNAL" } };
}

type AnyResponse = ServerResponse | Http2ServerResponse;

/** Sends `{code, message, reason}` with the status of the table; a no-op once headers went out. */
export function writeRestError(res: AnyResponse, err: unknown, extraHeaders?: Record<string, string>): void {
  if (res.headersSent) {
    // The status line is gone; a broken transfer is the only honest signal.
    res.destroy();
    return;
  }
  const { status, body } = restErrorOf(err);
  writeJson(res, status, body, extraHeaders);
}

/** Writes a complete JSON answer. */
export function writeJson(
  res: AnyResponse,
  status: number,
  body: unknown,
  extraHeaders?: Record<string, string>,
): void {
  const text = JSON.stringify(body);
  const headers: Record<string, string | number> = {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    ...extraHeaders,
  };
  // The two response types have incompatible writeHead overloads.
  (res as ServerResponse).writeHead(status, headers);
  (res as ServerResponse).end(text);
}
