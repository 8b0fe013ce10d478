// The route table, read from the `google.api.http` option of each method.
// Every revision's operations live under "/<rev>"; the unprefixed paths
// serve the union, the last revision that has an operation winning.
import { getOption, hasOption } from "@bufbuild/protobuf";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { http } from "../../gen/google/api/annotations_pb.js";
import type { HttpRule } from "../../gen/google/api/http_pb.js";
import { matchPathTemplate, parsePathTemplate } from "./path-template.js";
import type { PathBinding, PathTemplate } from "./path-template.js";

export interface RestRevision {
  /** The path prefix without slashes: "v1", "v2". */
  readonly name: string;
  readonly services: readonly DescService[];
}

export interface Route {
  readonly verb: string;
  readonly template: PathTemplate;
  readonly method: DescMethod;
  /** "*", a top-level request field name, or "" for no body. */
  readonly body: string;
  /** A top-level response field name, or "" for the whole message. */
  readonly responseBody: string;
  /** The revision prefix, or undefined for the unprefixed union. */
  readonly revision: string | undefined;
}

export interface RouteTable {
  readonly routes: readonly Route[];
  /** "/v1", "/v2": paths under these belong to REST even when nothing matches. */
  readonly prefixes: readonly string[];
}

function ruleBindings(rule: HttpRule): { verb: string; path: string }[] {
  const p = rule.pattern;
  const own =
    p.case === undefined ? [] : p.case === "custom" ? [{ verb: p.value.kind.toUpperCase(), path: p.value.path }] : [{ verb: p.case.toUpperCase(), path: p.value }];
  return own;
}

function routesOf(method: DescMethod, rule: HttpRule, prefix: string, revision: string | undefined): Route[] {
  const out: Route[] = [];
  for (const r of [rule, ...rule.additionalBindings]) {
    const where = `${method.parent.typeName}.${method.name}`;
    if (r.body !== "" && r.body !== "*" && !method.input.fields.some((f) => f.name === r.body)) {
      throw new Error(`${where}: body "${r.body}" names no request field`);
    }
    if (r.responseBody !== "" && !method.output.fields.some((f) => f.name === r.responseBody)) {
      throw new Error(`${where}: response_body "${r.responseBody}" names no response field`);
    }
    for (const { verb, path } of ruleBindings(r)) {
      out.push({
        verb,
        template: parsePathTemplate(prefix + path),
        method,
        body: r.body,
        responseBody: r.responseBody,
        revision,
      });
    }
  }
  return out;
}

/** Builds the table; throws at start-up on a rule it cannot serve. */
export function buildRouteTable(revisions: readonly RestRevision[]): RouteTable {
  const routes: Route[] = [];
  const union = new Map<string, { method: DescMethod; rule: HttpRule }>();
  for (const rev of revisions) {
    const seen = new Set<string>();
    for (const service of rev.services) {
      for (const method of service.methods) {
        if (!hasOption(method, http)) continue;
        // Client and bidi streams have no REST form.
        if (method.methodKind !== "unary" && method.methodKind !== "server_streaming") continue;
        const rule = getOption(method, http);
        for (const route of routesOf(method, rule, `/${rev.name}`, rev.name)) {
          const key = `${route.verb} ${route.template.source}`;
          if (seen.has(key)) throw new Error(`two operations of revision ${rev.name} at ${key}`);
          seen.add(key);
          routes.push(route);
        }
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
    for (const route of routesOf(method, rule, "", undefined)) {
      if (union.get(`${route.verb} ${route.template.source}`)?.method === method) routes.push(route);
    }
  }
  return { routes, prefixes: revisions.map((r) => `/${r.name}`) };
}

export type RouteMatch =
  | { readonly kind: "found"; readonly route: Route; readonly bindings: readonly PathBinding[] }
  | { readonly kind: "wrong-method"; readonly allowed: readonly string[] }
  | { readonly kind: "none" };

function literalCount(t: PathTemplate): number {
  return t.segments.filter((s) => s.kind === "literal").length;
}

/** Finds the route for a verb and a raw (percent-encoded) path. */
export function findRoute(table: RouteTable, verb: string, rawPath: string): RouteMatch {
  const hits: { route: Route; bindings: PathBinding[] }[] = [];
  for (const route of table.routes) {
    const bindings = matchPathTemplate(route.template, rawPath);
    if (bindings) hits.push({ route, bindings });
  }
  if (hits.length === 0) return { kind: "none" };
  // The most literal template wins: "/a/b" before "/a/{x}".
  const same = hits.filter((h) => h.route.verb === verb).sort((a, b) => literalCount(b.route.template) - literalCount(a.route.template));
  const best = same[0];
  if (best) return { kind: "found", route: best.route, bindings: best.bindings };
  return { kind: "wrong-method", allowed: [...new Set(hits.map((h) => h.route.verb))].sort() };
}
