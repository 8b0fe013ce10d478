// The visibility predicate (docs/contract/18-access.md): the one piece of SQL that
// says which rows a caller's grants may see, composed into every statement
// that returns, counts or walks resources. Nothing filters rows after
// reading them.
//
// A version of a resource is visible when its datasource is granted and its
// access_level is within the clearance, both as the version reads at the
// read point and as the resource reads now (the stricter of the two):
// - now: the `resources` row, whose datasource_id column the writes keep
//   (store/attribution.ts);
// - at a point t: the version's own access_level, and the attribution
//   period of resource_attribution that holds t (no period = no datasource).
//
// Grants that see everything give no predicate at all (undefined), so the
// unrestricted statements are exactly the statements of before. The grants
// are written into the SQL as literals, not parameters: their values are few
// (three levels, the granted datasource ids) and the statements keep their
// parameter numbering; every id is quoted as a SQL string literal.
import { ACCESS_LEVELS, accessRank, seesEverything, type Grants } from "../access/index.js";

/** A SQL string literal (standard_conforming_strings: only quotes need doubling). */
function literal(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

function levelsIn(grants: Grants, column: string): string | undefined {
  if (grants.clearance === "restricted") return undefined;
  const allowed = ACCESS_LEVELS.filter((l) => accessRank(l) <= accessRank(grants.clearance));
  return `${column} IN (${allowed.map(literal).join(", ")})`;
}

/** The granted datasource ids as a SQL list ("" for none), or undefined for every datasource. */
function granted(grants: Grants): string | undefined {
  if (grants.datasources === "all") return undefined;
  return [...grants.datasources].sort().map(literal).join(", ");
}

function and(parts: readonly (string | undefined)[]): string | undefined {
  const present = parts.filter((p): p is string => p !== undefined);
  return present.length === 0 ? undefined : `(${present.join(" AND ")})`;
}

/**
 * Over a `resources` row (the current state) aliased `c`: the caller may see
 * it now. undefined when the grants see everything.
 */
export function visibleNow(grants: Grants, c: string): string | undefined {
  if (seesEverything(grants)) return undefined;
  const ds = granted(grants);
  // Never NULL (the clause holds or fails), so NOT (...) of it is safe too.
  const source =
    ds === undefined
      ? undefined
      : ds === ""
        ? `${c}.datasource_id IS NULL`
        : `(${c}.datasource_id IS NULL OR ${c}.datasource_id IN (${ds}))`;
  return and([levelsIn(grants, `${c}.access_level`), source]);
}

/**
 * Over a version row (from resource_history or resource_versions: any row
 * with identifier and access_level) aliased `v`, read at the point `t` (an
 * SQL expression of a timestamptz): the caller may see that version, as it
 * read at t and as its resource reads now. undefined when the grants see
 * everything. This is the predicate the change feed and the history use.
 */
export function visibleAt(grants: Grants, v: string, t: string): string | undefined {
  if (seesEverything(grants)) return undefined;
  const ds = granted(grants);
  const then =
    ds === undefined
      ? undefined
      : `NOT EXISTS (SELECT 1 FROM resource_attribution va
                      WHERE va.identifier = ${v}.identifier AND va.tx_from <= ${t} AND va.tx_to > ${t}${
                        ds === "" ? "" : ` AND va.datasource_id NOT IN (${ds})`
                      })`;
  const now = visibleNow(grants, "vc");
  return and([
    levelsIn(grants, `${v}.access_level`),
    then,
    now === undefined
      ? undefined
      : `EXISTS (SELECT 1 FROM resources vc WHERE vc.identifier = ${v}.identifier AND ${now})`,
  ]);
}

/** ` AND <predicate>`, or nothing: for appending to a WHERE clause. */
export function andVisible(predicate: string | undefined): string {
  return predicate === undefined ? "" : ` AND ${predicate}`;
}

/** Whether these grants may see a resource of datasource `id` (for the registry and statistics; no level involved). */
export function grantsDatasource(grants: Grants, id: string): boolean {
  return grants.datasources === "all" || grants.datasources.has(id);
}
