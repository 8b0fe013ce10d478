// The read audit (docs/contract/19-audit-history.md): with AUDIT_LOG set,
// every call that returns, counts or exports resources, every registry
// call, and every presigned download, parquet preview and listing writes
// one JSON line
//   {at, actor, method, request_id, address, as_of, outcome, identifiers, count}
// before its answer is released. Calls that answer resources by identifier
// (read, history, children, parents, latest artefact, the registry) list
// the identifiers answered, at most MAX_AUDIT_IDENTIFIERS, `count` saying
// how many in all; calls that answer for a request (query, count, export,
// statistics, the change feed, object reads) carry a summary of the request
// instead (its fields, but never a filter's value nor a cursor, docs/contract/19-audit-history.md;
// object reads only their direction or limits, never a path), and the row
// count. A line never holds a payload value, an external uid (registry
// lines never carry the request), an object path or a cursor.
//
// One interceptor in the one interceptor list, outside the auth interceptor,
// so a call auth refuses is audited too; the actor auth named is read once
// the call is answered: the credentials' actor whenever they authenticated,
// also for a call their scope does not allow (refused permission_denied),
// null only when authentication failed. Calls refused before the
// interceptors (by authentication, at the front door) are audited by
// auditRefused, with actor null. Every surface (gRPC, gRPC-Web, Connect, REST) is audited
// alike. When a line cannot be written the call fails `unavailable` and
// answers nothing: an answer is never released unaudited.
//
// Streams (QueryParquet, Watch) write their line when their first message
// is ready, before it is released, with `count` null: the rows an export
// will hold are not known then, and holding every byte back until the end
// would undo the streaming. A stream refused before its first message (a
// foreign cursor, an unknown field, a bad `since`) writes its refusal's
// code, never ok; one that fails later says so in its call log line.
import { appendFile } from "node:fs/promises";
import { toJson, type DescMessage, type DescMethod, type JsonValue, type Message } from "@bufbuild/protobuf";
import { ConnectError, type Interceptor } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { actorKey, callerKey } from "../auth/index.js";
import { serviceError } from "../errors.js";
import { toServiceError } from "../store/index.js";
import { requestIdKey } from "./interceptors.js";
import { peerKey } from "../http/peer.js";

/** Identifiers one line lists at most; `count` says how many were answered in all. */
const MAX_AUDIT_IDENTIFIERS = 1000;

/** Writes one line (newline included); resolves once it is written, rejects when it cannot be. */
export type AuditSink = (line: string) => Promise<void>;

/**
 * AUDIT_LOG as a sink: "stdout", or a file path. A file line is appended by
 * path each time (open, one write, close): a log rotated by rename or a
 * removed directory is noticed at the next line, never written into an
 * unlinked file. Not fsynced: a line survives the service's crash, not the
 * machine's (one fsync per read would cost more than the read).
 */
export function auditSink(target: string): AuditSink {
  if (target === "stdout") {
    return (line) =>
      new Promise<void>((resolve, reject) => {
        process.stdout.write(line, (err) => (err ? reject(err) : resolve()));
      });
  }
  return (line) => appendFile(target, line, { encoding: "utf8", flag: "a", mode: 0o600 });
}

/**
 * Why AUDIT_LOG cannot be written, or undefined when it can: a file target
 * is opened for appending (created if absent, nothing written), as each line
 * will be. For start-up (a bad path fails it) and readiness (a log directory
 * removed later makes /readyz fail), so operators learn of it before clients do.
 */
export async function auditTargetProblem(target: string): Promise<string | undefined> {
  if (target === "stdout") return undefined;
  try {
    await appendFile(target, "", { encoding: "utf8", flag: "a", mode: 0o600 });
    return undefined;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return `cannot be appended to${code === undefined ? "" : ` (${code})`}`;
  }
}

interface AuditLine {
  at: string;
  /** null: no caller was authenticated (refused by authentication). */
  actor: string | null;
  method: string;
  request_id: string | null;
  /** The client's address as the socket says (http/peer.ts), null when the call came in process. */
  address: string | null;
  /** The read point asked for (`as_of`); null for now, or the point a cursor carries. */
  as_of: string | null;
  outcome: string;
  identifiers?: string[];
  request?: JsonValue;
  count: number | null;
}

type Answer = { identifiers: readonly string[] } | { count: number | null };

/** What one method's line says. */
interface Rule {
  /** From the response (protobuf-es message). */
  readonly answer: (res: Record<string, unknown>) => Answer;
  /**
   * What of the request the line carries (proto3 JSON in, a summary out):
   * absent for methods whose request holds values the line must not (the
   * registry's external uid, an object path).
   */
  readonly request?: (json: JsonValue) => JsonValue;
  /** Whether a call with this request is audited (absent: every call). */
  readonly audited?: (message: Record<string, unknown>) => boolean;
}

const ids = (list: readonly string[]): Answer => ({ identifiers: list });
const rows = (count: number | null): Answer => ({ count });
const idOf = (r: unknown): string => (r as { identifier: string }).identifier;
const list = (res: Record<string, unknown>, field: string): unknown[] => (res[field] as unknown[] | undefined) ?? [];

type JsonObject = { [k: string]: JsonValue };
const isObject = (v: JsonValue | undefined): v is JsonObject =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** A filter without its value: the field and operator asked, never the value compared (it is a payload value). */
function condition(c: JsonValue): JsonValue {
  if (!isObject(c)) return null;
  const out: JsonObject = {};
  if (c["field"] !== undefined) out["field"] = c["field"];
  if (c["op"] !== undefined) out["op"] = c["op"];
  if (Array.isArray(c["any"])) out["any"] = c["any"].map(condition);
  return out;
}

/**
 * A query's request as a line carries it: every field but the filters'
 * values (payload values) and the cursor (it encodes the last row's
 * identifier and sort value, a payload value too), which become `true`
 * when given.
 */
function querySummary(json: JsonValue): JsonValue {
  if (!isObject(json)) return json;
  const out: JsonObject = { ...json };
  if (Array.isArray(json["filters"])) out["filters"] = json["filters"].map(condition);
  if (json["cursor"] !== undefined) out["cursor"] = true;
  return out;
}

/** A request whose every field the line may carry (no payload value, no external uid in it). */
const whole = (json: JsonValue): JsonValue => json;
/** Only the named fields of a request. */
const only =
  (...names: string[]) =>
  (json: JsonValue): JsonValue => {
    const out: JsonObject = {};
    if (isObject(json)) for (const n of names) if (json[n] !== undefined) out[n] = json[n];
    return out;
  };

const downloads = (m: Record<string, unknown>): boolean =>
  typeof m["direction"] !== "string" || m["direction"].toLowerCase() !== "upload";

/** Methods by service short name and method name (both revisions alike). */
const RULES: ReadonlyMap<string, Rule> = new Map<string, Rule>([
  ["ResourceService/Read", { answer: (res) => ids(list(res, "resources").map(idOf)) }],
  [
    "ResourceService/History",
    {
      answer: (res) =>
        ids(
          list(res, "versions").length > 0 ? [idOf((list(res, "versions")[0] as { resource: unknown }).resource)] : [],
        ),
    },
  ],
  ["QueryService/Query", { answer: (res) => rows(list(res, "results").length), request: querySummary }],
  ["QueryService/Count", { answer: (res) => rows(Number(res["count"])), request: querySummary }],
  ["QueryService/QueryParquet", { answer: () => rows(null), request: querySummary }],
  ["LineageService/Children", { answer: (res) => ids(list(res, "nodes").map(idOf)) }],
  ["LineageService/Parents", { answer: (res) => ids(list(res, "identifiers") as string[]) }],
  ["ArtefactService/Latest", { answer: (res) => ids(res["resource"] !== undefined ? [idOf(res["resource"])] : []) }],
  ["StatsService/Stats", { answer: (res) => rows(list(res, "datasources").length), request: whole }],
  ["StatsService/DetailedStats", { answer: (res) => rows(list(res, "datasources").length), request: whole }],
  ["EventService/Watch", { answer: () => rows(null), request: whole }],
  // An online backup answers every resource: its line names the request (a since, or none).
  ["AdminService/Dump", { answer: () => rows(null), request: whole }],
  // The registry: the identifier answered, never the request (it holds the external uid).
  ["RegistryService/RegisterPatient", { answer: (res) => ids([idOf(res)]) }],
  ["RegistryService/ResolvePatient", { answer: (res) => ids([idOf(res)]) }],
  ["RegistryService/RegisterStudy", { answer: (res) => ids([idOf(res)]) }],
  ["RegistryService/ResolveStudy", { answer: (res) => ids([idOf(res)]) }],
  // Object reads: how many objects or rows, never the path (a payload value of the resource naming it).
  ["StorageService/Presign", { answer: () => rows(1), request: only("direction"), audited: downloads }],
  [
    "StorageService/PresignBatch",
    { answer: (res) => rows(list(res, "urls").length), request: only("direction"), audited: downloads },
  ],
  [
    "StorageService/ParquetPreview",
    { answer: (res) => rows(Number(res["returnedRows"] ?? 0)), request: only("limit", "offset") },
  ],
  ["StorageService/List", { answer: (res) => rows(list(res, "keys").length) }],
]);

/** Whether calls of this method write an audit line (for docs and tests). */
export function isAudited(serviceShortName: string, methodName: string): boolean {
  return RULES.has(`${serviceShortName}/${methodName}`);
}

/** The request as the line carries it, when the rule carries any. */
function requestOf(rule: Rule, desc: DescMessage, message: unknown): JsonValue | undefined {
  if (rule.request === undefined || message === undefined) return undefined;
  return rule.request(toJson(desc, message as Message, { useProtoFieldName: true }));
}

/** The `as_of` a request asked for, if its message has one. */
function asOfOf(message: unknown): string | null {
  const v = (message as { asOf?: unknown } | undefined)?.asOf;
  return typeof v === "string" ? v : null;
}

/** An async iterable of the one result already taken off a request stream. */
function once<T>(first: IteratorResult<T>): AsyncIterable<T> {
  return {
    [Symbol.asyncIterator]: () => {
      let taken = first.done === true;
      return {
        next: (): Promise<IteratorResult<T>> => {
          if (taken) return Promise.resolve({ done: true, value: undefined });
          taken = true;
          return Promise.resolve(first);
        },
      };
    },
  };
}

function unique(list: readonly string[]): string[] {
  return [...new Set(list)];
}

const outcomeOf = (err: unknown): string =>
  codeToString(err instanceof ConnectError ? err.code : toServiceError(err).code);

/** Writes a line through the sink; AUDIT_UNAVAILABLE when it cannot be written. */
function writer(sink: AuditSink): (line: AuditLine) => Promise<void> {
  return async (line) => {
    try {
      await sink(`${JSON.stringify(line)}\n`);
    } catch (cause) {
      throw serviceError("AUDIT_UNAVAILABLE", "the audit log cannot be written; nothing is answered until it can", {
        cause,
      });
    }
  };
}

/**
 * The line of an audited call refused before the interceptors ran (by
 * authentication at the front door: http/front-door.ts): who asked is not
 * known (actor null), nor what (its body was never read). Resolves once
 * written; rejects when it cannot be (the refusal goes out either way).
 */
export function auditRefused(
  sink: AuditSink,
  method: DescMethod,
  err: ConnectError,
  call: { readonly requestId: string | undefined; readonly address: string | undefined },
): Promise<void> {
  if (!RULES.has(`${method.parent.name}/${method.name}`)) return Promise.resolve();
  return writer(sink)({
    at: new Date().toISOString(),
    actor: null,
    method: `${method.parent.typeName}/${method.name}`,
    request_id: call.requestId ?? null,
    address: call.address ?? null,
    as_of: null,
    outcome: codeToString(err.code),
    count: 0,
  });
}

export function createAuditInterceptor(sink: AuditSink): Interceptor {
  const write = writer(sink);
  return (next) => async (req) => {
    const rule = RULES.get(`${req.service.name}/${req.method.name}`);
    if (rule === undefined) return next(req);
    // A server stream's one request message, taken off its iterable to be logged and handed on.
    let message: unknown = req.stream ? undefined : req.message;
    if (req.stream && req.method.methodKind === "server_streaming") {
      const first = await req.message[Symbol.asyncIterator]().next();
      message = first.done === true ? undefined : first.value;
      req = { ...req, message: once(first) };
    }
    if (message !== undefined && rule.audited !== undefined && !rule.audited(message as Record<string, unknown>))
      return next(req);
    const at = new Date().toISOString();
    // After the call: the auth interceptor (inside this one) names the actor once the credentials
    // authenticate, also when it then refuses the call for its scope; null only when they did not.
    const line = (outcome: string, rest: Pick<AuditLine, "count"> & Partial<AuditLine>): AuditLine => ({
      at,
      actor: req.contextValues.get(actorKey) ?? req.contextValues.get(callerKey)?.actor ?? null,
      method: `${req.service.typeName}/${req.method.name}`,
      request_id: req.contextValues.get(requestIdKey) ?? null,
      address: req.contextValues.get(peerKey) ?? null,
      as_of: asOfOf(message),
      outcome,
      ...rest,
    });
    const request = requestOf(rule, req.method.input, message);
    const withRequest = request === undefined ? {} : { request };
    let res: Awaited<ReturnType<typeof next>>;
    try {
      res = await next(req);
    } catch (err) {
      // A refused call answers nothing; its line says who asked, what, and how it ended.
      await write(
        line(outcomeOf(err), { ...withRequest, ...("request" in withRequest ? {} : { identifiers: [] }), count: 0 }),
      );
      throw err;
    }
    if (res.stream) {
      // A stream answers once its first message is ready (or it ends): its line is written then, before
      // that message is released, saying how the stream began; a stream refused before any message
      // (a foreign cursor, an unknown field, a bad since) says so, never ok.
      const source = res.message;
      async function* audited(): AsyncGenerator<unknown, void, undefined> {
        const it = source[Symbol.asyncIterator]();
        let first: IteratorResult<unknown>;
        try {
          first = await it.next();
        } catch (err) {
          await write(line(outcomeOf(err), { ...withRequest, count: 0 }));
          throw err;
        }
        let done = first.done === true;
        try {
          await write(line("ok", { ...withRequest, count: null }));
          if (done) return;
          yield first.value;
          for (;;) {
            const n = await it.next();
            if (n.done === true) {
              done = true;
              return;
            }
            yield n.value;
          }
        } finally {
          if (!done) await it.return?.();
        }
      }
      return { ...res, message: audited() } as typeof res;
    }
    const answer = rule.answer(res.message);
    if ("identifiers" in answer) {
      const all = unique(answer.identifiers);
      await write(line("ok", { identifiers: all.slice(0, MAX_AUDIT_IDENTIFIERS), count: all.length }));
    } else {
      await write(line("ok", { ...withRequest, count: answer.count }));
    }
    return res;
  };
}
