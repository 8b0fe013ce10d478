// MAX_TREE_DEPTH (API.md section 16): no active resource may have more than
// `max` ancestors. Checked inside the write's transaction, after the rows are
// written, by one statement whose walks stop one step past the limit, so its
// cost is bounded by (written resources + their active descendants) x max,
// however deep a forged chain is. A walk stops where it would meet a node it
// has passed: a cycle is the parent check's to name (CYCLE), not a depth.
// Kept apart from the write SQL on purpose.
import { treeTooDeep } from "../errors.js";
import type { Queryable } from "./db.js";

export const DEFAULT_MAX_TREE_DEPTH = 64;

/**
 * Throws failed_precondition when one of `ids` (or, with `descendants`, an
 * active resource below one of them) now has more than `max` ancestors.
 */
export async function checkTreeDepth(tx: Queryable, ids: readonly string[], max: number, options: { descendants: boolean }): Promise<void> {
  if (ids.length === 0) return;
  // Every step is an index probe from the rows already found (a LATERAL
  // subquery with LIMIT or OFFSET is not flattened into a join), never a scan
  // of the table: with = ANY over a batch of 1,000 and a recursive join the
  // planner chose sequential scans, so each write cost O(table) (migration
  // notes in BENCHMARKS.md, issue 13).
  const { rows } = await tx.query<{ identifier: string }>(
    `WITH RECURSIVE
       roots AS MATERIALIZED (
         SELECT r.identifier, r.parent_identifier
           FROM (SELECT DISTINCT unnest($1::text[]) AS id) i
          CROSS JOIN LATERAL (SELECT identifier, parent_identifier FROM resources
                               WHERE identifier = i.id AND NOT is_deleted LIMIT 1) r
       ),
       down(root, identifier, below, path) AS (
         SELECT identifier, identifier, 0, ARRAY[identifier] FROM roots
         UNION ALL
         SELECT d.root, c.identifier, d.below + 1, d.path || c.identifier FROM down d
          CROSS JOIN LATERAL (SELECT identifier FROM resources
                               WHERE parent_identifier = d.identifier AND NOT is_deleted OFFSET 0) c
          WHERE $3::boolean AND d.below <= $2 AND c.identifier <> ALL(d.path)
       ),
       heights(root, below) AS (SELECT root, max(below) FROM down GROUP BY root),
       up(start, node, depth, path) AS (
         SELECT identifier, parent_identifier, 1, ARRAY[identifier, parent_identifier] FROM roots
          WHERE parent_identifier IS NOT NULL
         UNION ALL
         SELECT u.start, r.parent_identifier, u.depth + 1, u.path || r.parent_identifier FROM up u
          CROSS JOIN LATERAL (SELECT parent_identifier FROM resources WHERE identifier = u.node LIMIT 1) r
          WHERE r.parent_identifier IS NOT NULL AND u.depth <= $2 AND r.parent_identifier <> ALL(u.path)
       ),
       ancestors(start, n) AS (SELECT start, max(depth) FROM up GROUP BY start)
     SELECT h.root AS identifier FROM heights h LEFT JOIN ancestors a ON a.start = h.root
      WHERE coalesce(a.n, 0) + h.below > $2
      ORDER BY h.root
      LIMIT 1`,
    [ids, max, options.descendants],
  );
  const first = rows[0];
  if (first !== undefined) throw treeTooDeep(first.identifier, max);
}
