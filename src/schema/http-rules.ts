// The one reader of the `google.api.http` rules. Every revision's operations
// live under "/<rev>"; the unprefixed paths serve the union, the last
// revision that has an operation at a verb and path winning. The REST
// gateway (rest/routes.ts), the OpenAPI document (schema/openapi.ts) and the
// generated reference (docs/api.md) all read this list.
import { getOption, hasOption } from "@bufbuild/protobuf";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { http } from "../../gen/google/api/annotations_pb.js";
import type { HttpRule } from "../../gen/google/api/http_pb.js";

/** One revision of the surface: its path prefix and the services it serves. */
export interface Revision {
  /** The path prefix without slashes: "v1", "v2". */
  readonly name: string;
  readonly services: readonly DescService[];
}

/** One verb at one path template, bound to one method. */
export interface HttpOperation {
  /** Upper case: "GET", "POST". */
  readonly verb: string;
  /** The path template as the rule writes it, with the revision prefix when there is one. */
  readonly template: string;
  readonly method: DescMethod;
  /** "*", a top-level request field name, or "" for no body. */
  readonly body: string;
  /** A top-level response field name, or "" for the whole message. */
  readonly responseBody: string;
  /** The revision prefix, or undefined for the unprefixed union. */
  readonly revision: string | undefined;
}

export interface HttpRules {
  /** Every revision's own operations in revision order, then the unprefixed union. */
  readonly operations: readonly HttpOperation[];
  /** "/v1", "/v2": paths under these belong to REST even when nothing matches. */
  readonly prefixes: readonly string[];
}

function ruleBindings(rule: HttpRule): { verb: string; path: string }[] {
  const p = rule.pattern;
  if (p.case === undefined) return [];
  if (p.case === "custom") return [{ verb: p.value.kind.toUpperCase(), path: p.value.path }];
  return [{ verb: p.case.toUpperCase(), path: p.value }];
}

function operationsOf(method: DescMethod, rule: HttpRule, revision: string | undefined): HttpOperation[] {
  const prefix = revision === undefined ? "" : `/${revision}`;
  const out: HttpOperation[] = [];
  for (const r of [rule, ...rule.additionalBindings]) {
    const where = `${method.parent.typeName}.${method.name}`;
    if (r.body !== "" && r.body !== "*" && !method.input.fields.some((f) => f.name === r.body)) {
      throw new Error(`${where}: body "${r.body}" names no request field`);
    }
    if (r.responseBody !== "" && !method.output.fields.some((f) => f.name === r.responseBody)) {
      throw new Error(`${where}: response_body "${r.responseBody}" names no response field`);
    }
    for (const { verb, path } of ruleBindings(r)) {
      out.push({ verb, template: prefix + path, method, body: r.body, responseBody: r.responseBody, revision });
    }
  }
  return out;
}

/** The http rule of a method REST can serve, or undefined. */
function httpRuleOf(method: DescMethod): HttpRule | undefined {
  if (!hasOption(method, http)) return undefined;
  // Client and bidi streams have no REST form.
  if (method.methodKind !== "unary" && method.methodKind !== "server_streaming") return undefined;
  return getOption(method, http);
}

/** Reads every operation of every revision; throws on a rule that cannot be served. */
export function readHttpRules(revisions: readonly Revision[]): HttpRules {
  const operations: HttpOperation[] = [];
  const union = new Map<string, { method: DescMethod; rule: HttpRule }>();
  for (const rev of revisions) {
    const seen = new Set<string>();
    for (const service of rev.services) {
      for (const method of service.methods) {
        const rule = httpRuleOf(method);
        if (rule === undefined) continue;
        for (const op of operationsOf(method, rule, rev.name)) {
          const key = `${op.verb} ${op.template}`;
          if (seen.has(key)) throw new Error(`two operations of revision ${rev.name} at ${key}`);
          seen.add(key);
          operations.push(op);
        }
        // Union: the last revision wins a verb and path.
        for (const r of [rule, ...rule.additionalBindings]) {
          for (const b of ruleBindings(r)) union.set(`${b.verb} ${b.path}`, { method, rule });
        }
      }
    }
  }
  const unprefixed = new Set<DescMethod>();
  for (const { method, rule } of union.values()) {
    if (unprefixed.has(method)) continue;
    unprefixed.add(method);
    // Only the bindings this method won go unprefixed.
    for (const op of operationsOf(method, rule, undefined)) {
      if (union.get(`${op.verb} ${op.template}`)?.method === method) operations.push(op);
    }
  }
  return { operations, prefixes: revisions.map((r) => `/${r.name}`) };
}
