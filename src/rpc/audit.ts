// The read audit (docs/contract/19-audit-history.md): with AUDIT_LOG set,
// every call that returns, counts or exports resources, and every registry
// call, writes one JSON line
//   {at, actor, method, request_id, outcome, identifiers, count}
// before its answer is released. Calls that answer resources by identifier
// (read, history, children, parents, latest artefact, the registry) list
// the identifiers answered, at most MAX_AUDIT_IDENTIFIERS, `count` saying
// how many in all; calls that answer for a request (query, count, export,
// statistics, the change feed) carry `request` (the request message as
// proto3 JSON) instead, and the row count. A line never holds a payload
// (only identifiers and the request) nor an external uid (registry lines
// list the identifier answered and never the request).
//
// One interceptor in the one interceptor list, inside the auth interceptor
// (it needs the caller's actor), so every surface (gRPC, gRPC-Web, Connect,
// REST) is audited alike. When a line cannot be written the call fails
// `unavailable` and answers nothing: an answer is never released unaudited.
//
// Streams (QueryParquet, Watch) write their line when the stream starts,
// before its first byte, with `count` null: the rows an export will hold
// are not known then, and holding every byte back until the end would undo
// the streaming. A stream that fails later says so in its call log line.
import { appendFile } from "node:fs/promises";
import { toJson, type DescMessage, type JsonValue, type Message } from "@bufbuild/protobuf";
import { ConnectError, type Interceptor } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { callerKey } from "../auth/index.js";
import { serviceError } from "../errors.js";
import { toServiceError } from "../store/index.js";
import { REQUEST_ID } from "./interceptors.js";

/** Identifiers one line lists at most; `count` says how many were answered in all. */
export const MAX_AUDIT_IDENTIFIERS = 1000;

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

interface AuditLine {
  at: string;
  actor: string;
  method: string;
  request_id: string | null;
  outcome: string;
  identifiers?: string[];
  request?: JsonValue;
  count: number | null;
}

type Answer = { identifiers: readonly string[] } | { request: true; count: number | null };

/** What one method's line says, from its request and response (protobuf-es messages). */
type Rule = (res: Record<string, unknown>) => Answer;

const ids = (list: readonly string[]): Answer => ({ identifiers: list });
const rows = (count: number): Answer => ({ request: true, count });
const idOf = (r: unknown): string => (r as { identifier: string }).identifier;
const list = (res: Record<string, unknown>, field: string): unknown[] => (res[field] as unknown[] | undefined) ?? [];

/** Methods by service short name and method name (both revisions alike). */
const RULES: ReadonlyMap<string, Rule> = new Map<string, Rule>([
  ["ResourceService/Read", (res) => ids(list(res, "resources").map(idOf))],
  ["ResourceService/History", (res) => ids(list(res, "versions").length > 0 ? [idOf((list(res, "versions")[0] as { resource: unknown }).resource)] : [])],
  ["QueryService/Query", (res) => rows(list(res, "results").length)],
  ["QueryService/Count", (res) => rows(Number(res["count"]))],
  ["QueryService/QueryParquet", () => rows(0)],
  ["LineageService/Children", (res) => ids(list(res, "nodes").map(idOf))],
  ["LineageService/Parents", (res) => ids(list(res, "identifiers") as string[])],
  ["ArtefactService/Latest", (res) => ids(res["resource"] !== undefined ? [idOf(res["resource"])] : [])],
  ["StatsService/Stats", (res) => rows(list(res, "datasources").length)],
  ["StatsService/DetailedStats", (res) => rows(list(res, "datasources").length)],
  ["EventService/Watch", () => rows(0)],
  // An online backup answers every resource: its line names the request (a since, or none).
  ["AdminService/Dump", () => rows(0)],
  // The registry: the identifier answered, never the request (it holds the external uid).
  ["RegistryService/RegisterPatient", (res) => ids([idOf(res)])],
  ["RegistryService/ResolvePatient", (res) => ids([idOf(res)])],
  ["RegistryService/RegisterStudy", (res) => ids([idOf(res)])],
  ["RegistryService/ResolveStudy", (res) => ids([idOf(res)])],
]);

/** Whether calls of this method write an audit line (for docs and tests). */
export function isAudited(serviceShortName: string, methodName: string): boolean {
  return RULES.has(`${serviceShortName}/${methodName}`);
}

/** The request as the line carries it (only for rules that answer for a request: never the registry's). */
function requestJson(desc: DescMessage, message: unknown): JsonValue {
  return toJson(desc, message as Message, { useProtoFieldName: true });
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

export function createAuditInterceptor(sink: AuditSink): Interceptor {
  const write = async (line: AuditLine): Promise<void> => {
    try {
      await sink(`${JSON.stringify(line)}\n`);
    } catch (cause) {
      throw serviceError("AUDIT_UNAVAILABLE", "the audit log cannot be written; nothing is answered until it can", { cause });
    }
  };
  return (next) => async (req) => {
    const rule = RULES.get(`${req.service.name}/${req.method.name}`);
    if (rule === undefined) return next(req);
    const base = {
      at: new Date().toISOString(),
      actor: req.contextValues.get(callerKey)?.actor ?? "unknown",
      method: `${req.service.typeName}/${req.method.name}`,
      request_id: req.header.get(REQUEST_ID),
    };
    // A server stream's one request message, taken off its iterable to be logged and handed on.
    let streamed: unknown;
    if (req.stream && req.method.methodKind === "server_streaming") {
      const first = await req.message[Symbol.asyncIterator]().next();
      streamed = first.done === true ? undefined : first.value;
      req = { ...req, message: once(first) };
    }
    let res: Awaited<ReturnType<typeof next>>;
    try {
      res = await next(req);
    } catch (err) {
      // A refused call answers no resources; its line says who asked and how it ended.
      const code = err instanceof ConnectError ? err.code : toServiceError(err).code;
      await write({ ...base, outcome: codeToString(code), identifiers: [], count: 0 });
      throw err;
    }
    if (res.stream) {
      const message = req.stream ? streamed : req.message;
      const request = message === undefined ? undefined : requestJson(req.method.input, message);
      await write({ ...base, outcome: "ok", ...(request !== undefined ? { request } : {}), count: null });
      return res;
    }
    const answer = rule(res.message);
    if ("identifiers" in answer) {
      const all = unique(answer.identifiers);
      await write({ ...base, outcome: "ok", identifiers: all.slice(0, MAX_AUDIT_IDENTIFIERS), count: all.length });
    } else {
      const request = req.stream ? null : requestJson(req.method.input, req.message);
      await write({ ...base, outcome: "ok", request, count: answer.count });
    }
    return res;
  };
}
