// The route table of the gateway: the operations the one reader of the
// http rules (schema/http-rules.ts) finds, with their path templates parsed
// for matching.
import { readHttpRules } from "../schema/http-rules.js";
import type { HttpOperation, Revision } from "../schema/http-rules.js";
import { matchPathTemplate, parsePathTemplate } from "./path-template.js";
import type { PathBinding, PathTemplate } from "./path-template.js";

/** An operation of the http rules with its path template parsed for matching. */
export type Route = Omit<HttpOperation, "template"> & { readonly template: PathTemplate };

export interface RouteTable {
  readonly routes: readonly Route[];
  /** "/v1", "/v2": paths under these belong to REST even when nothing matches. */
  readonly prefixes: readonly string[];
}

/** Builds the table; throws at start-up on a rule it cannot serve. */
export function buildRouteTable(revisions: readonly Revision[]): RouteTable {
  const { operations, prefixes } = readHttpRules(revisions);
  const routes = operations.map((op) => ({ ...op, template: parsePathTemplate(op.template) }));
  return { routes, prefixes };
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
