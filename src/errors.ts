// The error catalogue: every error the service answers is made here, from
// one entry of the table below. An entry names a stable machine-readable
// reason (UPPER_SNAKE), its Connect code and when it happens. The reason
// travels as a google.rpc.ErrorInfo detail (domain "resourcestore") over
// gRPC and Connect, and as `reason` in REST error bodies; the REST status
// comes from the code (http/error-status.ts) unless the entry sets its own.
// docs/errors.md is generated from this table (npm run docs).
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";

/** The ErrorInfo domain of every reason this service writes. */
export const ERROR_DOMAIN = "resourcestore";

export interface CatalogueEntry {
  readonly code: Code;
  /** Only where REST answers something other than the code's status. */
  readonly httpStatus?: number;
  /** When it happens, for the reference (docs/errors.md). */
  readonly when: string;
}

export const errorCatalogue = {
  // invalid_argument: the request is malformed whatever is stored.
  INVALID_ARGUMENT: {
    code: Code.InvalidArgument,
    when: "The request is malformed whatever is stored: a bad shape, type or format.",
  },
  MALFORMED_BODY: {
    code: Code.InvalidArgument,
    when: "The body is not JSON, not a JSON object where one is needed, not a valid binary message, JSON that does not decode as the method's request (Connect JSON, or a JSON message in a Connect streaming, gRPC or gRPC-Web envelope; the message is protobuf-es's, naming the field), or a compressed body or message that is not valid data of the compression its header names (`content-encoding`, `grpc-encoding`, `connect-content-encoding`). A compressed request is decompressed once and then checked as an uncompressed one; one over the body limit once decompressed is `resource_exhausted`, a compression the server does not offer `unimplemented`.",
  },
  UNKNOWN_FIELD: {
    code: Code.InvalidArgument,
    when: "The request names a field that its message, or the stored payload type, does not have: a REST body's key, or a key at any depth of a JSON request message (Connect JSON, or +json over Connect streaming, gRPC and gRPC-Web) (the message is protobuf-es's, naming the key). Protobuf binary carries numbers, not names: a field number the message does not have is skipped, as protobuf does.",
  },
  INVALID_PAYLOAD: {
    code: Code.InvalidArgument,
    when: "A payload field breaks its rules (required, pattern, allowed values, format, range).",
  },
  DUPLICATE_IDENTIFIER: { code: Code.InvalidArgument, when: "The same identifier appears twice in one batch." },
  SELF_PARENT: { code: Code.InvalidArgument, when: "A resource names itself as its parent." },
  BATCH_TOO_LARGE: {
    code: Code.InvalidArgument,
    when: "A batch has more items than the configured limit (MAX_BATCH_ITEMS).",
  },
  LIMIT_OUT_OF_RANGE: {
    code: Code.InvalidArgument,
    when: "A page size, preview limit or offset is outside its range.",
  },
  INVALID_AS_OF: { code: Code.InvalidArgument, when: "as_of is not an RFC 3339 timestamp with Z or an offset." },
  INVALID_CURSOR: {
    code: Code.InvalidArgument,
    when: "A page cursor was altered, expired with its secret, or belongs to another query.",
  },
  INVALID_QUERY: {
    code: Code.InvalidArgument,
    when: "A query's filter, sort or column selection names an unknown field or uses it wrongly.",
  },
  INVALID_OBJECT_PATH: {
    code: Code.InvalidArgument,
    when: "An object path, prefix, group, file name or relative path is not acceptable.",
  },
  TOO_MANY_KEYS: {
    code: Code.InvalidArgument,
    when: "More keys lie under a listed prefix than the configured limit (MAX_LIST_KEYS).",
  },
  NOT_PARQUET: { code: Code.InvalidArgument, when: "The object to preview is not a readable parquet file." },
  UNSUPPORTED_MEDIA_TYPE: {
    code: Code.InvalidArgument,
    httpStatus: 415,
    when: "REST: a request body whose content type is not application/json, or whose content-encoding is not gzip, br or identity (a gzip or br body is decompressed, within MAX_BODY_BYTES); nothing runs.",
  },
  FILTER_TOO_DEEP: {
    code: Code.InvalidArgument,
    when: "Filter any groups nest deeper than the configured limit (MAX_FILTER_DEPTH).",
  },
  PREVIEW_TOO_LARGE: {
    code: Code.InvalidArgument,
    when: "A parquet preview would read more bytes of the object, footer included, than the configured limit (MAX_PREVIEW_BYTES).",
  },
  // failed_precondition: the request conflicts with what is stored.
  FAILED_PRECONDITION: { code: Code.FailedPrecondition, when: "The request conflicts with what is stored." },
  IDENTIFIER_ACTIVE: { code: Code.FailedPrecondition, when: "A create names an identifier that is already active." },
  UNKNOWN_IDENTIFIER: {
    code: Code.FailedPrecondition,
    when: "An update, delete or restore names an identifier that was never created.",
  },
  DANGLING_PARENT: {
    code: Code.FailedPrecondition,
    when: "A parent is not an active resource (never created, or deleted).",
  },
  CYCLE: { code: Code.FailedPrecondition, when: "A new parent would make a cycle through other resources." },
  PAYLOAD_TYPE_CHANGED: { code: Code.FailedPrecondition, when: "An update would change a resource's payload_type." },
  TOMBSTONED: { code: Code.FailedPrecondition, when: "An update changes a deleted resource without restoring it." },
  ALREADY_REGISTERED: { code: Code.FailedPrecondition, when: "A patient or study is registered already." },
  NOT_REGISTERED: {
    code: Code.FailedPrecondition,
    when: "A patient or study to look up or register under is not registered.",
  },
  CONFLICT: { code: Code.FailedPrecondition, when: "The database refused the change as conflicting with stored data." },
  TREE_TOO_DEEP: {
    code: Code.FailedPrecondition,
    when: "A create, update or restore would put a resource deeper than the configured number of ancestors (MAX_TREE_DEPTH); nothing is written.",
  },
  TOO_MANY_CHILDREN: {
    code: Code.FailedPrecondition,
    when: "GET /children of a node with more children than the configured limit (MAX_CHILDREN); query by parent_identifier with a cursor instead.",
  },
  // aborted: the request raced another change.
  VERSION_MISMATCH: {
    code: Code.Aborted,
    when: "An update's expected_version, or a delete's or restore's expected_versions, differs from the stored version (or names an identifier never created); the message and the ErrorInfo's `identifiers` name them, and nothing of the batch is written.",
  },
  // not_found
  NOT_FOUND: {
    code: Code.NotFound,
    when: "A resource, object, artefact, datasource or service asked for does not exist (at that time).",
  },
  NO_OPERATION: { code: Code.NotFound, when: "No operation at this REST path (or not in this revision)." },
  // unimplemented
  UNIMPLEMENTED: { code: Code.Unimplemented, when: "The method is not served." },
  METHOD_NOT_ALLOWED: {
    code: Code.Unimplemented,
    httpStatus: 405,
    when: "REST: the path exists, but not for this HTTP verb (the Allow header lists those it has).",
  },
  // credentials
  UNAUTHENTICATED: {
    code: Code.Unauthenticated,
    when: "No bearer token, a malformed Authorization header, or a token that is not valid; on an open change feed, its JWT expired.",
  },
  PERMISSION_DENIED: {
    code: Code.PermissionDenied,
    when: "The token is valid but lacks the scope the operation needs.",
  },
  MISDIRECTED_REQUEST: {
    code: Code.PermissionDenied,
    httpStatus: 421,
    when: "The request's Host (HTTP/2 :authority) is not one the service answers to: with authentication off only localhost, 127.0.0.1, [::1] and ALLOWED_HOSTS; with it on, ALLOWED_HOSTS when set. Refused before anything else runs.",
  },
  OUTSIDE_GRANTS: {
    code: Code.PermissionDenied,
    when: "A write would create, change or move a resource outside the caller's grants (its datasources and clearance; docs/access.md), or register a patient under a datasource not granted; nothing is written.",
  },
  // limits
  RESOURCE_EXHAUSTED: { code: Code.ResourceExhausted, when: "A limit of the service was reached." },
  BODY_TOO_LARGE: {
    code: Code.ResourceExhausted,
    when: "The request body is larger than the configured limit (MAX_BODY_BYTES).",
  },
  TOO_MANY_STREAMS: {
    code: Code.ResourceExhausted,
    httpStatus: 429,
    when: "MAX_WATCH_STREAMS change-feed streams (Watch, GET /events) are open in this process.",
  },
  TOO_MANY_EXPORTS: {
    code: Code.ResourceExhausted,
    httpStatus: 429,
    when: "MAX_CONCURRENT_EXPORTS parquet exports are running and none finished within EXPORT_QUEUE_MS.",
  },
  // unavailable: try again later.
  UNAVAILABLE: { code: Code.Unavailable, when: "A dependency is unavailable." },
  DATABASE_UNAVAILABLE: { code: Code.Unavailable, when: "The database cannot be reached or is shutting down." },
  CONCURRENT_CONFLICT: {
    code: Code.Unavailable,
    when: "The change collided with a concurrent one (serialization failure, deadlock); retrying succeeds.",
  },
  STORAGE_UNAVAILABLE: {
    code: Code.Unavailable,
    when: "Object storage cannot be reached, answers with an error, or its bucket is missing.",
  },
  OBJECT_CHANGED: {
    code: Code.Unavailable,
    when: "An object changed while it was being read; retrying reads the new one.",
  },
  AUDIT_UNAVAILABLE: {
    code: Code.Unavailable,
    when: "AUDIT_LOG is set and the call's audit line cannot be written (a full disk, a removed directory, a closed stdout); the call answers nothing.",
  },
  IDENTITY_PROVIDER_UNAVAILABLE: {
    code: Code.Unavailable,
    when: "The OIDC provider's signing keys could not be fetched and none are usable (the last good ones are older than OIDC_JWKS_MAX_STALE_MS past their refresh, or the token names a key they lack), or a fetch is held back after failures.",
  },
  // anything else
  INTERNAL: {
    code: Code.Internal,
    when: "Anything else; the message never carries internals (stack, SQL, paths) and the server logs the cause.",
  },
  // Codes the service does not raise itself; the RPC framework may.
  CANCELED: { code: Code.Canceled, when: "The client cancelled the call (raised by the RPC framework)." },
  DEADLINE_EXCEEDED: {
    code: Code.DeadlineExceeded,
    when: "The client's deadline passed (raised by the RPC framework).",
  },
  REQUEST_TIMEOUT: {
    code: Code.DeadlineExceeded,
    httpStatus: 408,
    when: "The request's headers or body did not arrive within HEADERS_TIMEOUT_MS or REQUEST_TIMEOUT_MS; the connection (HTTP/1.1) or stream (HTTP/2) is closed after the answer.",
  },
} as const satisfies Record<string, CatalogueEntry>;

export type Reason = keyof typeof errorCatalogue;

/** The reasons whose entry has Connect code C. */
export type ReasonFor<C extends Code> = {
  [R in Reason]: (typeof errorCatalogue)[R]["code"] extends C ? R : never;
}[Reason];

export interface ServiceErrorOptions {
  /** Machine-readable context in the ErrorInfo (never values a client did not send). */
  readonly metadata?: Readonly<Record<string, string>>;
  /** For the server's log only: ConnectError never puts a cause on the wire. */
  readonly cause?: unknown;
}

/** Makes the error of a catalogue entry: its code, the message, an ErrorInfo with the reason. */
export function serviceError(reason: Reason, message: string, options: ServiceErrorOptions = {}): ConnectError {
  const info = create(ErrorInfoSchema, { reason, domain: ERROR_DOMAIN, metadata: { ...options.metadata } });
  return new ConnectError(
    message,
    errorCatalogue[reason].code,
    undefined,
    [{ desc: ErrorInfoSchema, value: info }],
    options.cause,
  );
}

function isReason(value: string): value is Reason {
  return Object.hasOwn(errorCatalogue, value);
}

/** The reason a client is told for a code when the error carries none (framework errors). */
function genericReason(code: Code): string {
  if (code === Code.Unknown || code === Code.DataLoss) return "INTERNAL";
  return codeToString(code).toUpperCase();
}

/** The catalogue reason an error carries; for any other error, its code's generic reason. */
export function reasonOf(err: unknown): string {
  if (!(err instanceof ConnectError)) return "INTERNAL";
  const info = err.findDetails(ErrorInfoSchema).find((d) => d.domain === ERROR_DOMAIN && isReason(d.reason));
  return info?.reason ?? genericReason(err.code);
}

/** The catalogue entry of an error (its reason's, else its code's generic one). */
export function entryOf(err: unknown): CatalogueEntry | undefined {
  const reason = reasonOf(err);
  return isReason(reason) ? errorCatalogue[reason] : undefined;
}

/** The error itself when it carries a catalogue reason, else the same error with its code's generic reason. */
export function withReason(err: ConnectError): ConnectError {
  if (err.findDetails(ErrorInfoSchema).some((d) => d.domain === ERROR_DOMAIN)) return err;
  const generic = genericReason(err.code);
  if (!isReason(generic) || errorCatalogue[generic].code !== err.code) return err;
  const out = new ConnectError(err.rawMessage, err.code, err.metadata, undefined, err.cause);
  out.details = [
    ...err.details,
    { desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason: generic, domain: ERROR_DOMAIN }) },
  ];
  return out;
}

/** The same error (code, reason, details) with `prefix: ` before its message, e.g. "items[3]". */
export function prefixMessage(err: ConnectError, prefix: string): ConnectError {
  const out = new ConnectError(`${prefix}: ${err.rawMessage}`, err.code, err.metadata, undefined, err.cause);
  out.details = [...err.details];
  return out;
}

// One maker per code, the reason defaulting to the code's generic one.

/** The request is malformed whatever is stored. */
export function invalidArgument(
  message: string,
  reason: ReasonFor<Code.InvalidArgument> = "INVALID_ARGUMENT",
): ConnectError {
  return serviceError(reason, message);
}

/** The request conflicts with what is stored. */
export function failedPrecondition(
  message: string,
  reason: ReasonFor<Code.FailedPrecondition> = "FAILED_PRECONDITION",
): ConnectError {
  return serviceError(reason, message);
}

/**
 * Optimistic concurrency: the stored versions of these identifiers are not
 * the ones the client expected (409 aborted, nothing written). The
 * identifiers travel in the message and, comma-separated, in the ErrorInfo.
 */
export function abortedVersionMismatch(identifiers: readonly string[]): ConnectError {
  const shown =
    identifiers.slice(0, 5).join(", ") + (identifiers.length > 5 ? ` and ${identifiers.length - 5} more` : "");
  return serviceError("VERSION_MISMATCH", `the stored version differs from the expected one: ${shown}`, {
    metadata: { identifiers: identifiers.join(",") },
  });
}

export function notFound(message: string, reason: ReasonFor<Code.NotFound> = "NOT_FOUND"): ConnectError {
  return serviceError(reason, message);
}

export function unauthenticated(message: string): ConnectError {
  return serviceError("UNAUTHENTICATED", message);
}

export function permissionDenied(message: string): ConnectError {
  return serviceError("PERMISSION_DENIED", message);
}

/** A write that would put resources outside the caller's grants (docs/access.md); only identifiers the caller wrote are named. */
export function outsideGrants(ids: readonly string[]): ConnectError {
  const shown = ids.slice(0, 5).join(", ");
  const more = ids.length > 5 ? ` and ${ids.length - 5} more` : "";
  return serviceError("OUTSIDE_GRANTS", `outside the caller's grants (datasources and clearance): ${shown}${more}`);
}

export function resourceExhausted(
  message: string,
  reason: ReasonFor<Code.ResourceExhausted> = "RESOURCE_EXHAUSTED",
): ConnectError {
  return serviceError(reason, message);
}

export function unavailable(
  message: string,
  reason: ReasonFor<Code.Unavailable> = "UNAVAILABLE",
  cause?: unknown,
): ConnectError {
  return serviceError(reason, message, { cause });
}

export function unimplemented(message: string, reason: ReasonFor<Code.Unimplemented> = "UNIMPLEMENTED"): ConnectError {
  return serviceError(reason, message);
}

/** The client went away (or cancelled) before the call was answered. */
export function canceled(message: string, cause?: unknown): ConnectError {
  return serviceError("CANCELED", message, { cause });
}

/** Anything else: the message never carries internals (stack, SQL, paths); `cause` is for the log. */
export function internal(cause?: unknown): ConnectError {
  return serviceError("INTERNAL", "internal error", { cause });
}

// --- Defence limits (docs/limits.md) ----------------------------------------
/** A REST body that is not application/json: 415 invalid_argument, nothing runs. */
export function unsupportedMediaType(contentType: string): ConnectError {
  const shown = contentType === "" ? "none" : JSON.stringify(contentType.slice(0, 100));
  return invalidArgument(
    `a REST request body must be application/json, got content type ${shown}`,
    "UNSUPPORTED_MEDIA_TYPE",
  );
}

/** A REST body in a content-encoding the gateway does not decode: 415, before the body is read. */
export function unsupportedContentEncoding(encoding: string, offered: readonly string[]): ConnectError {
  return invalidArgument(
    `a REST request body may be sent as ${offered.join(", ")} or uncompressed, got content-encoding ${JSON.stringify(encoding.slice(0, 100))}`,
    "UNSUPPORTED_MEDIA_TYPE",
  );
}

/** A Host the service does not answer to (DNS rebinding defence): 421, before anything runs. */
export function misdirectedRequest(host: string | undefined): ConnectError {
  const shown = host === undefined || host === "" ? "no Host" : `Host ${JSON.stringify(host.slice(0, 100))}`;
  return serviceError(
    "MISDIRECTED_REQUEST",
    `this service does not answer to ${shown}; add it to ALLOWED_HOSTS if it is the service's own name`,
  );
}

/** More exports than MAX_CONCURRENT_EXPORTS, and no slot within EXPORT_QUEUE_MS: 429 resource_exhausted. */
export function tooManyExports(max: number, waitedMs: number): ConnectError {
  return resourceExhausted(
    `${max} parquet exports are running; none finished within ${waitedMs} ms, try again later`,
    "TOO_MANY_EXPORTS",
  );
}

/** A write that would put a resource deeper than MAX_TREE_DEPTH ancestors. */
export function treeTooDeep(identifier: string, max: number): ConnectError {
  return failedPrecondition(
    `resource ${JSON.stringify(identifier)} would have more than ${max} ancestors (MAX_TREE_DEPTH)`,
    "TREE_TOO_DEEP",
  );
}

/** Filter `any` groups nested deeper than MAX_FILTER_DEPTH (or a request nested past any sane depth). */
export function filterTooDeep(max: number): ConnectError {
  return invalidArgument(`filter groups nest too deep (at most ${max} nested any groups)`, "FILTER_TOO_DEEP");
}

/** A parquet preview that would read more than MAX_PREVIEW_BYTES of the object. */
export function previewTooLarge(needed: number, max: number): ConnectError {
  return invalidArgument(
    `the parquet preview would read ${needed} bytes of the object, more than ${max} (MAX_PREVIEW_BYTES)`,
    "PREVIEW_TOO_LARGE",
  );
}
// --- end of defence limits ---------------------------------------------------
