// The one place where database failures become service errors. Client
// mistakes are caught before SQL runs; what reaches here is either a
// conflict the database noticed, an outage, or a bug. Messages never carry
// SQL text, table names or stacks.
import { ConnectError } from "@connectrpc/connect";
import { failedPrecondition, internal, invalidArgument, unavailable } from "../errors.js";

const CONNECTION_ERRNOS = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "ENOTFOUND", "EHOSTUNREACH"]);

function codeOf(err: unknown): string | undefined {
  if (typeof err === "object" && err !== null && "code" in err) {
    const code = err.code;
    return typeof code === "string" ? code : undefined;
  }
  return undefined;
}

function looksLikeLostConnection(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return /connection terminated|connection ended|not queryable|client has encountered a connection error|timeout exceeded when trying to connect|pglite is closed/i.test(
    err.message,
  );
}

/** Maps anything thrown on the data path to a ConnectError fit for a client. */
export function toServiceError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  const code = codeOf(err);
  if (code !== undefined) {
    if (CONNECTION_ERRNOS.has(code)) return unavailable("database unavailable", "DATABASE_UNAVAILABLE");
    if (code === "23505") return failedPrecondition("the request conflicts with a stored resource", "CONFLICT");
    if (code === "23503") return failedPrecondition("the request refers to a resource that does not exist", "CONFLICT");
    // A standby cancels a read whose snapshot the replay must take away (docs/scaling.md: hot_standby_feedback, max_standby_streaming_delay).
    if (
      (code === "40001" || code === "40P01") &&
      /conflict with recovery/i.test(err instanceof Error ? err.message : "")
    ) {
      return unavailable("the standby cancelled the read (conflict with recovery); retry", "CONCURRENT_CONFLICT");
    }
    if (code === "40001" || code === "40P01")
      return unavailable("the request conflicted with a concurrent one; retry", "CONCURRENT_CONFLICT");
    // 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now, 08xxx connection exceptions.
    if (code.startsWith("57P") || code.startsWith("08"))
      return unavailable("database unavailable", "DATABASE_UNAVAILABLE");
    if (code === "53300") return unavailable("database unavailable", "DATABASE_UNAVAILABLE");
    // Class 22: a value the database refused; validation should have caught it first.
    if (code.startsWith("22")) return invalidArgument("a value is out of range or malformed");
  }
  if (looksLikeLostConnection(err)) return unavailable("database unavailable", "DATABASE_UNAVAILABLE");
  // The cause is kept for server-side logs only: the client sees "internal error".
  return internal(err);
}

/** Runs a database call; whatever it throws comes out as a service error (toServiceError). */
export async function guard<T>(p: () => Promise<T>): Promise<T> {
  try {
    return await p();
  } catch (err) {
    throw toServiceError(err);
  }
}
