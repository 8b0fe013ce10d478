// A caller's grants (docs/contract/18-access.md): the datasources it may see
// and its clearance, the highest access level it may see. A plain value,
// made once per call by the auth interceptor and passed down explicitly to
// every store call: nothing below the pipeline looks the caller up itself.

export type AccessLevel = "public" | "internal" | "restricted";

/** Ordered from least to most sensitive. */
export const ACCESS_LEVELS: readonly AccessLevel[] = ["public", "internal", "restricted"];

function isAccessLevel(value: string): value is AccessLevel {
  return (ACCESS_LEVELS as readonly string[]).includes(value);
}

/** 0 for public, 1 for internal, 2 for restricted. */
export function accessRank(level: AccessLevel): number {
  return ACCESS_LEVELS.indexOf(level);
}

export interface Grants {
  /** The datasource ids the caller may see (case kept), or "all" (`datasource:*`, or no datasource scope). */
  readonly datasources: "all" | ReadonlySet<string>;
  /** The highest access level the caller may see. */
  readonly clearance: AccessLevel;
}

/** What a caller with no grant scopes has, and everyone with authentication off. */
export const ALL_GRANTS: Grants = Object.freeze({ datasources: "all", clearance: "restricted" });

/** Whether these grants see everything (no predicate needed). */
export function seesEverything(grants: Grants): boolean {
  return grants.datasources === "all" && grants.clearance === "restricted";
}

/** Whether these grants may see a resource of this datasource (undefined: none) at this level. */
export function maySee(grants: Grants, datasource: string | null | undefined, level: AccessLevel): boolean {
  if (accessRank(level) > accessRank(grants.clearance)) return false;
  if (grants.datasources === "all" || datasource === null || datasource === undefined) return true;
  return grants.datasources.has(datasource);
}

/** Who is calling: the name written into the history (docs/contract/19-audit-history.md) and the grants. */
export interface Caller {
  readonly actor: string;
  readonly grants: Grants;
  /** When the caller's credential expires (ms since the epoch; a JWT's `exp`): open feeds end then. Undefined = never. */
  readonly expiresAt?: number;
}

/** The caller with authentication off. */
export const LOCAL_CALLER: Caller = Object.freeze({ actor: "local", grants: ALL_GRANTS });

/** A grant scope: `datasource:<id>`, `datasource:*`, `clearance:<level>` or `actor:<name>`. */
export type GrantScope =
  | { readonly kind: "datasource"; readonly id: string }
  | { readonly kind: "clearance"; readonly level: AccessLevel }
  | { readonly kind: "actor"; readonly name: string };

const DATASOURCE_ID = /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,255}$/;
const ACTOR_NAME = /^[\x21-\x7e]{1,200}$/;

/**
 * Parses one grant scope; undefined when `text` is not one (a plain scope
 * such as `read`), or an error message when it is one but malformed.
 */
export function parseGrantScope(text: string): GrantScope | { readonly error: string } | undefined {
  const colon = text.indexOf(":");
  if (colon <= 0) return undefined;
  const kind = text.slice(0, colon).toLowerCase();
  const value = text.slice(colon + 1);
  switch (kind) {
    case "datasource":
      if (value === "*") return { kind, id: "*" };
      return DATASOURCE_ID.test(value)
        ? { kind, id: value }
        : { error: `datasource scope ${JSON.stringify(text)} names no valid datasource id` };
    case "clearance": {
      const level = value.toLowerCase();
      return isAccessLevel(level)
        ? { kind, level }
        : { error: `clearance scope ${JSON.stringify(text)}: public, internal or restricted` };
    }
    case "actor":
      return ACTOR_NAME.test(value)
        ? { kind, name: value }
        : { error: `actor scope ${JSON.stringify(text)}: 1 to 200 printable characters, no spaces` };
    default:
      return undefined;
  }
}

/**
 * The grants the grant scopes give: no datasource scope = every datasource;
 * no clearance scope = restricted (tokens configured before grants keep the
 * access they had); several clearances: the highest listed.
 */
export function grantsOf(scopes: Iterable<GrantScope>): Grants {
  let all = false;
  let any = false;
  const ids = new Set<string>();
  let clearance: AccessLevel | undefined;
  for (const s of scopes) {
    if (s.kind === "datasource") {
      any = true;
      if (s.id === "*") all = true;
      else ids.add(s.id);
    } else if (s.kind === "clearance") {
      if (clearance === undefined || accessRank(s.level) > accessRank(clearance)) clearance = s.level;
    }
  }
  const datasources = !any || all ? "all" : ids;
  const level = clearance ?? "restricted";
  return datasources === "all" && level === "restricted"
    ? ALL_GRANTS
    : Object.freeze({ datasources, clearance: level });
}

/** A stable text for grants: equal grants, equal keys (to share work between callers with the same grants). */
export function grantsKey(grants: Grants): string {
  const ds = grants.datasources === "all" ? "*" : [...grants.datasources].sort().join(",");
  return `${grants.clearance}|${ds}`;
}
