// What a write may not do to the tree, checked inside its transaction after
// the rows are written, by one statement:
// - MAX_TREE_DEPTH (docs/contract/16-limits.md): no active resource may have more
//   than `max` ancestors. The walks stop one step past the limit, so the
//   cost is bounded by (written resources + their active descendants) x max,
//   however deep a forged chain is. A walk stops where it would meet a node
//   it has passed: a cycle is the cycle check's to name, not a depth.
// - DANGLING_PARENT: the parent of a resource whose parent was just set is
//   an active resource.
// - CYCLE: no resource whose parent was just set sits on a cycle. Only a
//   node with children can, and every new cycle runs through a changed
//   edge. That walk runs only when the depth check passed (so for an active
//   resource it meets at most `max` ancestors).
// Errors in that order (the first problem found of the first kind).
//
// Every step is an index probe from the rows already found: a LATERAL
// subquery with LIMIT or OFFSET is not flattened into a join. With
// `identifier = ANY($1)` over a batch of 1,000 and plain joins in the walks
// the planner chose sequential scans and hash joins, so each write read the
// whole table several times (docs/benchmarks/create.md, "the tree checks of every write";
// test/store/write-check-plans.test.ts holds the plans to it).
import { failedPrecondition, treeTooDeep } from "../errors.js";
import type { Queryable } from "./db.js";
import { listIds } from "./sql.js";

export const DEFAULT_MAX_TREE_DEPTH = 64;

export interface TreeCheck {
  /** MAX_TREE_DEPTH. */
  readonly max: number;
  /** Whether the active resources below `ids` moved with them (a re-parent, a restore), so their depth is checked too. */
  readonly descendants: boolean;
  /** Those of `ids` whose parent was just set: their parent must be active and they may not sit on a cycle. */
  readonly parentsSet: readonly string[];
}

type Problem = { problem: "depth" | "parent" | "cycle"; identifier: string; other: string | null };

/** How far below each written resource its active descendants reach (0 when they did not move). */
const HEIGHTS = {
  moved: `down(root, identifier, below, path) AS (
    SELECT identifier, identifier, 0, ARRAY[identifier] FROM roots
    UNION ALL
    SELECT d.root, c.identifier, d.below + 1, d.path || c.identifier FROM down d
     CROSS JOIN LATERAL (SELECT identifier FROM resources
                          WHERE parent_identifier = d.identifier AND NOT is_deleted OFFSET 0) c
     WHERE d.below <= $3 AND c.identifier <> ALL(d.path)
  ),
  heights(root, below) AS (SELECT root, max(below) FROM down GROUP BY root),`,
  still: `heights(root, below) AS (SELECT identifier, 0 FROM roots),`,
};

const sqlOf = (heights: string): string => `WITH RECURSIVE
  given AS MATERIALIZED (
    SELECT i.n, r.identifier, r.parent_identifier, r.is_deleted, r.identifier = ANY($2::text[]) AS parent_set
      FROM unnest($1::text[]) WITH ORDINALITY AS i(id, n)
     CROSS JOIN LATERAL (SELECT identifier, parent_identifier, is_deleted FROM resources
                          WHERE identifier = i.id LIMIT 1) r
  ),
  roots AS (SELECT identifier, parent_identifier FROM given WHERE NOT is_deleted),
  ${heights}
  up(start, node, depth, path) AS (
    SELECT identifier, parent_identifier, 1, ARRAY[identifier, parent_identifier] FROM roots
     WHERE parent_identifier IS NOT NULL
    UNION ALL
    SELECT u.start, r.parent_identifier, u.depth + 1, u.path || r.parent_identifier FROM up u
     CROSS JOIN LATERAL (SELECT parent_identifier FROM resources WHERE identifier = u.node LIMIT 1) r
     WHERE r.parent_identifier IS NOT NULL AND u.depth <= $3 AND r.parent_identifier <> ALL(u.path)
  ),
  ancestors(start, n) AS (SELECT start, max(depth) FROM up GROUP BY start),
  too_deep AS MATERIALIZED (
    SELECT h.root AS identifier FROM heights h LEFT JOIN ancestors a ON a.start = h.root
     WHERE coalesce(a.n, 0) + h.below > $3
     ORDER BY h.root
     LIMIT 1
  ),
  changed AS (SELECT n, identifier, parent_identifier, is_deleted FROM given WHERE parent_set AND parent_identifier IS NOT NULL),
  -- Each parent once: a batch's children share a few.
  parents AS (
    SELECT d.identifier, EXISTS (SELECT 1 FROM (SELECT 1 FROM resources p
                                                 WHERE p.identifier = d.identifier AND NOT p.is_deleted LIMIT 1) x) AS active
      FROM (SELECT DISTINCT parent_identifier AS identifier FROM changed) d
  ),
  -- ORDER BY created_at makes the first child a probe of resources_parent_idx: with a bare
  -- LIMIT 1 the planner expects a match within a few rows and scans the table instead, which
  -- for a node without children (most of them) reads it whole.
  starts AS (
    SELECT s.n, s.identifier, s.parent_identifier FROM changed s
     CROSS JOIN LATERAL (SELECT 1 FROM resources c WHERE c.parent_identifier = s.identifier
                          ORDER BY c.created_at LIMIT 1) child
     WHERE NOT EXISTS (SELECT 1 FROM too_deep)
  ),
  walk(n, start, cur) AS (
    SELECT n, identifier, parent_identifier FROM starts
    UNION
    SELECT w.n, w.start, r.parent_identifier FROM walk w
     CROSS JOIN LATERAL (SELECT parent_identifier FROM resources WHERE identifier = w.cur LIMIT 1) r
     WHERE w.cur <> w.start AND r.parent_identifier IS NOT NULL
  ),
  problems AS (
    SELECT 0 AS n, 'depth' AS problem, identifier, NULL AS other FROM too_deep
    UNION ALL
    SELECT c.n, 'parent', c.identifier, c.parent_identifier FROM changed c
      JOIN parents p ON p.identifier = c.parent_identifier
     WHERE NOT c.is_deleted AND NOT p.active
    UNION ALL
    SELECT DISTINCT n, 'cycle', start, NULL FROM walk WHERE cur = start
  )
SELECT problem, identifier, other FROM problems ORDER BY n, problem DESC`;
const SQL_MOVED = sqlOf(HEIGHTS.moved);
const SQL_STILL = sqlOf(HEIGHTS.still);

/**
 * Throws failed_precondition when the resources `ids` (and, with
 * `descendants`, the active ones below them) now break the tree: too deep
 * (TREE_TOO_DEEP), under a parent that is not active (DANGLING_PARENT), or
 * on a cycle (CYCLE).
 */
export async function checkTree(tx: Queryable, ids: readonly string[], check: TreeCheck): Promise<void> {
  if (ids.length === 0) return;
  const { rows } = await tx.query<Problem>(check.descendants ? SQL_MOVED : SQL_STILL, [
    [...new Set(ids)],
    check.parentsSet,
    check.max,
  ]);
  const deep = rows.find((p) => p.problem === "depth");
  if (deep !== undefined) throw treeTooDeep(deep.identifier, check.max);
  const dangling = rows.filter((p) => p.problem === "parent");
  if (dangling.length > 0) {
    throw failedPrecondition(
      `parent is not an active resource: ${listIds(dangling.map((p) => `${p.identifier} -> ${p.other ?? ""}`))}`,
      "DANGLING_PARENT",
    );
  }
  const cycles = rows.filter((p) => p.problem === "cycle");
  if (cycles.length > 0)
    throw failedPrecondition(`parent would make a cycle: ${listIds(cycles.map((p) => p.identifier))}`, "CYCLE");
}
