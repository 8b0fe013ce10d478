// The route table of the gateway: the operations the one reader of the
// http rules (schema/http-rules.ts) finds, with their path templates parsed
// for matching.
import { readHttpRules } from "../schema/http-rules.js";
import type { HttpOperation, Revision } from "../schema/http-rules.js";
import { matchPathTemplate, parsePathTemplate, safeDecode } from "./path-template.js";
import type { PathBinding, PathTemplate } from "./path-template.js";

/** An operation of the http rules with its path template parsed for matching. */
export type Route = Omit<HttpOperation, "template"> & { readonly template: PathTemplate };

export interface RouteTable {
  readonly routes: readonly Route[];
  /**
   * The routes by their leading literal segments ("v1/resources", or
   * "resources" when the second is not literal), each list in table order;
   * `rest` holds those that start with a variable or carry a verb suffix.
   * A path can only match a route of its own key or of `rest`.
   */
  readonly byLead: ReadonlyMap<string, readonly Route[]>;
  readonly rest: readonly Route[];
  /** "/v1", "/v2": paths under these belong to REST even when nothing matches. */
  readonly prefixes: readonly string[];
  /** Each route's place in `routes`. */
  readonly order: ReadonlyMap<Route, number>;
}

/** Builds the table; throws at start-up on a rule it cannot serve. */
export function buildRouteTable(revisions: readonly Revision[]): RouteTable {
  const { operations, prefixes } = readHttpRules(revisions);
  const routes = operations.map((op) => ({ ...op, template: parsePathTemplate(op.template) }));
  const byLead = new Map<string, Route[]>();
  const rest: Route[] = [];
  for (const route of routes) {
    const key = leadKey(route.template);
    if (key === undefined) rest.push(route);
    else if (byLead.has(key)) byLead.get(key)!.push(route);
    else byLead.set(key, [route]);
  }
  return { routes, prefixes, byLead, rest, order: new Map(routes.map((r, i) => [r, i])) };
}

/** "a/b" for a template that starts with two literal segments, "a" for one, undefined otherwise. */
function leadKey(t: PathTemplate): string | undefined {
  const [first, second] = t.segments;
  if (t.verb !== undefined || first?.kind !== "literal") return undefined;
  return second?.kind === "literal" ? `${first.value}/${second.value}` : first.value;
}

/** A raw segment as the literal it would match (matchPathTemplate compares decoded literals too). */
function asLiteral(raw: string): string {
  return raw.includes("%") ? (safeDecode(raw) ?? raw) : raw;
}

/** The routes a raw path could match, in table order. */
function candidates(table: RouteTable, rawPath: string): readonly Route[] {
  const parts = rawPath.split("/", 3);
  const first = asLiteral(parts[1] ?? "");
  const one = table.byLead.get(first) ?? [];
  const two = parts.length > 2 ? (table.byLead.get(`${first}/${asLiteral(parts[2]!)}`) ?? []) : [];
  if (two.length === 0 && table.rest.length === 0) return one;
  if (one.length === 0 && table.rest.length === 0) return two;
  // Table order, as a search of the whole table would meet them.
  return [...one, ...two, ...table.rest].sort((a, b) => table.order.get(a)! - table.order.get(b)!);
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
  for (const route of candidates(table, rawPath)) {
    const bindings = matchPathTemplate(route.template, rawPath);
    if (bindings) hits.push({ route, bindings });
  }
  if (hits.length === 0) return { kind: "none" };
  // The most literal template wins: "/a/b" before "/a/{x}".
  const same = hits
    .filter((h) => h.route.verb === verb)
    .sort((a, b) => literalCount(b.route.template) - literalCount(a.route.template));
  const best = same[0];
  if (best) return { kind: "found", route: best.route, bindings: best.bindings };
  return { kind: "wrong-method", allowed: [...new Set(hits.map((h) => h.route.verb))].sort() };
}
