// SQL fragments shared by the store's statements.
import type { JsonObject } from "@bufbuild/protobuf";
import type { Queryable } from "./db.js";
import type { StoredResource } from "./types.js";

/** A timestamptz as RFC 3339 UTC with exactly six fractional digits. */
export function ts(expr: string): string {
  return `to_char(${expr} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

/** The select list of a resource row (from `resources`, `resource_versions` or `resource_history`) aliased `a`. */
export function resourceColumns(a: string): string {
  return `${a}.identifier, ${a}.payload_type, ${a}.parent_identifier, ${a}.license, ${a}.access_level,
    ${a}.derived_from, ${a}.payload, ${ts(`${a}.created_at`)} AS created_at, ${ts(`${a}.updated_at`)} AS updated_at,
    ${a}.version::text AS version`;
}

/** The client-written columns of `resources` and `resource_versions`, as the tables hold them. */
export interface WritableRow {
  identifier: string;
  payload_type: string;
  parent_identifier: string | null;
  license: string | null;
  access_level: string;
  derived_from: string[];
  payload: JsonObject;
}

export interface ResourceRow extends WritableRow {
  created_at: string;
  updated_at: string;
  version: string;
  children?: string[] | null;
}

export function toStoredResource(row: ResourceRow, withChildren: boolean): StoredResource {
  const out: StoredResource = {
    identifier: row.identifier,
    payloadType: row.payload_type,
    parentIdentifier: row.parent_identifier,
    license: row.license,
    accessLevel: row.access_level,
    derivedFrom: row.derived_from,
    payload: row.payload,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    version: Number(row.version),
  };
  if (withChildren) out.children = row.children ?? [];
  return out;
}

/**
 * Takes the clock: the first statement of every write transaction. The row
 * lock serialises writers, so later READ COMMITTED statements of this
 * transaction see every earlier commit; the stamp strictly increases.
 */
export async function tickClock(tx: Queryable): Promise<string> {
  const { rows } = await tx.query<{ at: string }>(
    `UPDATE clock SET last = greatest(clock_timestamp(), last + interval '1 microsecond') RETURNING ${ts("last")} AS at`,
  );
  const at = rows[0]?.at;
  if (at === undefined) throw new Error("clock row missing");
  return at;
}

/**
 * Finds what a write broke among `changedParents` (resources whose parent was
 * just set): a parent that is not active, or a cycle. Rows: {problem,
 * identifier, other}. (The replaced versions reach the history by the
 * trigger of migration 0006, not here.)
 */
export async function checkParents(
  tx: Queryable,
  changedParents: readonly string[],
): Promise<{ problem: "parent" | "cycle"; identifier: string; other: string | null }[]> {
  if (changedParents.length === 0) return [];
  // Index probes from the given rows only (LATERAL ... LIMIT is not flattened
  // into a join), as in checkTreeDepth: a hash join here scanned the whole
  // table on every write. Problems come in the order of `changedParents`.
  const { rows } = await tx.query<{ problem: "parent" | "cycle"; identifier: string; other: string | null }>(
    `WITH RECURSIVE
     changed AS MATERIALIZED (
        SELECT i.n, c.identifier, c.parent_identifier, c.is_deleted
          FROM unnest($1::text[]) WITH ORDINALITY AS i(id, n)
         CROSS JOIN LATERAL (SELECT identifier, parent_identifier, is_deleted FROM resources
                              WHERE identifier = i.id LIMIT 1) c
         WHERE c.parent_identifier IS NOT NULL
     ),
     -- Only a node with children can sit on a cycle, and every new cycle runs through a changed edge.
     -- ORDER BY created_at makes the first child a probe of resources_parent_idx: with a bare
     -- LIMIT 1 the planner expects a match within a few rows and scans the table instead, which
     -- for a node without children (most of them) reads it whole.
     starts AS (
        SELECT s.n, s.identifier, s.parent_identifier FROM changed s
         CROSS JOIN LATERAL (SELECT 1 FROM resources c WHERE c.parent_identifier = s.identifier
                              ORDER BY c.created_at LIMIT 1) child
     ),
     walk(n, start, cur) AS (
        SELECT n, identifier, parent_identifier FROM starts
        UNION
        SELECT w.n, w.start, r.parent_identifier FROM walk w
         CROSS JOIN LATERAL (SELECT parent_identifier FROM resources WHERE identifier = w.cur LIMIT 1) r
         WHERE w.cur <> w.start AND r.parent_identifier IS NOT NULL
     ),
     problems AS (
        SELECT c.n, 'parent' AS problem, c.identifier, c.parent_identifier AS other FROM changed c
          LEFT JOIN LATERAL (SELECT true AS active FROM resources p
                              WHERE p.identifier = c.parent_identifier AND NOT p.is_deleted LIMIT 1) p ON true
         WHERE NOT c.is_deleted AND p.active IS NULL
        UNION ALL
        SELECT DISTINCT n, 'cycle', start, NULL FROM walk WHERE cur = start
     )
     SELECT problem, identifier, other FROM problems ORDER BY n, problem DESC`,
    [[...new Set(changedParents)]],
  );
  return rows;
}

/** A short list of identifiers for an error message. */
export function listIds(ids: readonly string[], max = 5): string {
  const shown = ids.slice(0, max).join(", ");
  return ids.length > max ? `${shown} and ${ids.length - max} more` : shown;
}
