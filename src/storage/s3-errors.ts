// One place that turns what the AWS SDK throws into catalogue errors
// (docs/errors.md). The SDK's messages can carry hosts, keys and XML; none of
// it is passed on: the SDK error rides along as `cause` for the server's log
// only.
import { ConnectError } from "@connectrpc/connect";
import { internal, notFound, unavailable } from "../errors.js";

interface SdkErrorShape {
  name?: unknown;
  code?: unknown;
  $metadata?: { httpStatusCode?: unknown };
}

const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ETIMEDOUT",
  "EPIPE",
  "UND_ERR_SOCKET",
]);

function shape(err: unknown): SdkErrorShape {
  return typeof err === "object" && err !== null ? err : {};
}

/** True when S3 answered that the object (or key) does not exist. */
function isMissingObject(err: unknown): boolean {
  const e = shape(err);
  if (e.name === "NoSuchBucket") return false;
  return e.name === "NoSuchKey" || e.name === "NotFound" || e.$metadata?.httpStatusCode === 404;
}

/** Maps an S3 failure to a ConnectError; `what` names the object for a 404. */
export function storageError(err: unknown, what = "object"): ConnectError {
  if (err instanceof ConnectError) return err;
  const e = shape(err);
  if (e.name === "NoSuchBucket") return unavailable("object storage bucket is missing", "STORAGE_UNAVAILABLE", err);
  if (isMissingObject(err)) return notFound(`${what} not found`);
  const status = typeof e.$metadata?.httpStatusCode === "number" ? e.$metadata.httpStatusCode : undefined;
  if (status === 412 || e.name === "PreconditionFailed") {
    return unavailable("the object changed while it was being read; try again", "OBJECT_CHANGED", err);
  }
  if (status !== undefined && status >= 500)
    return unavailable("object storage is unavailable", "STORAGE_UNAVAILABLE", err);
  if (status === undefined) {
    // No HTTP answer at all: the connection failed or timed out.
    if (
      (typeof e.code === "string" && NETWORK_CODES.has(e.code)) ||
      e.name === "TimeoutError" ||
      e.name === "AbortError" ||
      e.name === "RequestTimeout"
    ) {
      return unavailable("object storage is unreachable", "STORAGE_UNAVAILABLE", err);
    }
  }
  return internal(err);
}
