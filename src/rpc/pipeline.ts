// The one pipeline every call runs, whichever way it came in: Connect, gRPC
// and gRPC-Web through connect's router (binary-guard.ts), REST (unary and
// streams) and plain unary Connect/gRPC through the lane (unary-lane.ts),
// plain gRPC Watch streams through the feed lane (feed-lane.ts). Each of
// those takes its
// interceptors, body limit, compressions and JSON options from the Pipeline
// made here, and from nowhere else: a new interceptor added here runs on
// every path, and no path can run a list of its own.
//
// Outermost first:
//   1. planned binary encoder  hands connect bytes, so every later
//                              interceptor still sees the message
//   2. tracing (slot)          docs/contract/20-tracing.md: a span around
//                              the whole call, so the call line and auth
//                              run inside it
//   3. call                    request id, sanitising (every failure below
//                              becomes a catalogue error), and the call's
//                              end: its metrics (the codes clients see)
//                              and its one log line, written together
//   4. audit (slot)            docs/contract/19-audit-history.md: outside
//                              auth, so a call auth refuses is audited too;
//                              it reads the actor auth named once the call
//                              is answered (also for a call refused for its
//                              scope; docs/contract/19-audit-history.md)
//   5. auth                    the caller's credentials and the method's
//                              scope; makes the caller (actor and grants,
//                              src/access/) that handlers read with callerOf
//   6. access (slot)           docs/contract/18-access.md: any check that
//                              needs the caller auth made, before the handler
//                              (the grants themselves go down to the store
//                              as a plain value)
// A slot is filled by passing its part in PipelineParts (app.ts): the
// access interceptor, the Tracing, the audit sink (the pipeline makes the
// audit interceptor from it); an empty slot is not in the list at all.
// A call answered before the interceptors could run (refused at the front
// door, a cached constant document) still gets what they would have written,
// from the pipeline and nowhere else (`answeredWithout`): its span, its
// audit line when it was a refusal of an audited operation, and its metrics
// and log line, from the same writer the call interceptor ends every call
// with (interceptors.ts, `createCallEnd`).
import type { DescMethod } from "@bufbuild/protobuf";
import type { ConnectError, ConnectRouterOptions, Interceptor } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import type { Compression } from "@connectrpc/connect/protocol";
import type { JsonReadOptions, JsonWriteOptions } from "@bufbuild/protobuf";
import { HistoryResponseSchema, ReadResponseSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { createAuthInterceptor, type Authenticator } from "../auth/index.js";
import type { Logger } from "../log.js";
import { createPlannedBinaryInterceptor } from "../protobuf/index.js";
import type { Arrival } from "../http/arrival.js";
import { peerOf } from "../http/peer.js";
import type { AnyRequest } from "../http/read-body.js";
import type { Tracing } from "../tracing/index.js";
import { auditRefused, createAuditInterceptor, type AuditSink } from "./audit.js";
import { createCallEnd, createCallInterceptor, type RecordMetrics } from "./interceptors.js";
import { sharedCompression } from "./shared-compression.js";

export interface PipelineParts {
  readonly log: Logger;
  readonly auth: Authenticator;
  /** Where every call's outcome is counted and timed (metrics.ts, made by the assembly with the registry it renders). */
  readonly metrics: { readonly record: RecordMetrics };
  /** MAX_BODY_BYTES: a larger request message is refused (resource_exhausted) on every path. */
  readonly maxBodyBytes: number;
  /** Slot 2 (see the top of this file): its interceptor, and the span of a call answered without it. */
  readonly tracing?: Pick<Tracing, "interceptor" | "recordCall">;
  /** Slot 6. */
  readonly access?: Interceptor;
  /** Slot 4: where the audit lines go (AUDIT_LOG, or a test's sink). */
  readonly audit?: AuditSink;
}

export interface Pipeline {
  /** Outermost first. */
  readonly interceptors: readonly Interceptor[];
  /** MAX_BODY_BYTES. */
  readonly readMaxBytes: number;
  /** The compressions offered for answers, in connect's order of preference. */
  readonly acceptCompression: readonly Compression[];
  /**
   * The same compressions for the change feed's streams (EventService), each
   * compressing a message once for every stream that sends it
   * (shared-compression.ts); this pipeline's own, so one app's streams share
   * with each other only. The feed lane compresses with them too, so its
   * streams and connect's share one compression of a message.
   */
  readonly feedCompression: readonly Compression[];
  /**
   * Connect JSON writes the proto field names (as_of, next_cursor), the names
   * the REST bodies use; it reads both spellings.
   */
  readonly jsonOptions: Partial<JsonReadOptions & JsonWriteOptions>;
  /** All of the above as connect's router options, for the paths connect serves. */
  readonly routerOptions: ConnectRouterOptions;
  /**
   * A call answered without the interceptors (refused at the front door, a
   * cached constant document): what they would have written, timed from its
   * arrival: its span when tracing is on, its audit line when it is a
   * refusal of an audited operation, its metrics, and its log line (on its
   * request's log record when the request has one).
   */
  answeredWithout(method: DescMethod, err: ConnectError | undefined, arrival: Arrival, req: AnyRequest): void;
}

/** The compressions the server offers, in connect's order of preference (the router's, and the unary lane's). */
export const ACCEPT_COMPRESSION: readonly Compression[] = [compressionGzip, compressionBrotli];

export function createPipeline(parts: PipelineParts): Pipeline {
  const slot = (i: Interceptor | undefined): Interceptor[] => (i === undefined ? [] : [i]);
  const endCall = createCallEnd(parts.log, (route, code, seconds) => parts.metrics.record(route, code, seconds));
  const interceptors: Interceptor[] = [
    createPlannedBinaryInterceptor([ReadResponseSchema, HistoryResponseSchema]),
    ...slot(parts.tracing?.interceptor),
    createCallInterceptor(parts.log, endCall),
    ...slot(parts.audit === undefined ? undefined : createAuditInterceptor(parts.audit)),
    createAuthInterceptor(parts.auth),
    ...slot(parts.access),
  ];
  // Unknown keys are refused (invalid_argument, UNKNOWN_FIELD), as on REST and as the protobuf JSON mapping
  // has it by default, where connect ignores them: a misspelt field (a filter, `as_of`) silently dropped
  // would answer another question than the one asked.
  const jsonOptions = { useProtoFieldName: true, ignoreUnknownFields: false } as const;
  return {
    interceptors,
    readMaxBytes: parts.maxBodyBytes,
    acceptCompression: ACCEPT_COMPRESSION,
    feedCompression: ACCEPT_COMPRESSION.map((c) => sharedCompression(c)),
    jsonOptions,
    routerOptions: {
      interceptors,
      readMaxBytes: parts.maxBodyBytes,
      acceptCompression: [...ACCEPT_COMPRESSION],
      jsonOptions,
    },
    answeredWithout(method, err, arrival, req) {
      const rpc = `${method.parent.typeName}/${method.name}`;
      const { audit, tracing } = parts;
      // A refusal (before the body, or of a cached document) is audited as the audit interceptor would.
      if (err !== undefined && audit !== undefined)
        auditRefused(audit, method, err, { requestId: arrival.requestId, address: peerOf(req) }).catch((e: unknown) =>
          parts.log.error(
            { err: e },
            "the audit line of a call refused before its interceptors ran could not be written",
          ),
        );
      endCall({
        rpc,
        code: err?.code,
        started: arrival.started,
        requestId: arrival.requestId,
        record: arrival.record,
        // Its span too, when tracing is on: the trace id goes into its log line.
        traceId: tracing?.recordCall(rpc, err?.code, req.headers, arrival.started),
      });
    },
  };
}
