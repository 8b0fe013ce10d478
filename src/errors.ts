// The error catalogue: every error the service answers is made here, with
// its Connect code. REST statuses come from one table (rest/status.ts).
import { Code, ConnectError } from "@connectrpc/connect";

/** The request is malformed whatever is stored. */
export function invalidArgument(message: string): ConnectError {
  return new ConnectError(message, Code.InvalidArgument);
}

/** The request conflicts with what is stored. */
export function failedPrecondition(message: string): ConnectError {
  return new ConnectError(message, Code.FailedPrecondition);
}

export function notFound(message: string): ConnectError {
  return new ConnectError(message, Code.NotFound);
}

export function unauthenticated(message: string): ConnectError {
  return new ConnectError(message, Code.Unauthenticated);
}

export function permissionDenied(message: string): ConnectError {
  return new ConnectError(message, Code.PermissionDenied);
}

export function resourceExhausted(message: string): ConnectError {
  return new ConnectError(message, Code.ResourceExhausted);
}

export function unavailable(message: string): ConnectError {
  return new ConnectError(message, Code.Unavailable);
}

export function unimplemented(message: string): ConnectError {
  return new ConnectError(message, Code.Unimplemented);
}

/** Anything else: the message never carries internals (stack, SQL, paths). */
export function internal(): ConnectError {
  return new ConnectError("internal error", Code.Internal);
}
