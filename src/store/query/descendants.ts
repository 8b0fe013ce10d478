// The one place that says where "every descendant of a parent" comes from:
// a walk down the parent edges (the current table, or the history at a
// point), bounded by the subtree it names: each step is a probe of the
// parent index from the rows found, never a scan of the store.
//
// A descendant is what repeated /children calls reach: the walk goes only
// through active resources, as the stored tree counts (tree_counts) and
// cascading deletes do. An active resource under a tombstoned parent is therefore
// nobody's descendant until that parent is restored.

/** Where the rows of a query are read: the current table, or the history at a point. */
export type RowSource = { readonly kind: "current" } | { readonly kind: "history"; readonly point: string };

/**
 * A CTE body `descendants(identifier)`: every active resource below
 * `rootParam` (a bound parameter). UNION stops on a cycle instead of looping.
 * Each step probes the parent index from the rows found (LATERAL with
 * OFFSET 0, which the planner does not flatten into a join): as a join it
 * hashed a sequential scan of the whole table at every step.
 */
export function descendantsCte(source: RowSource, rootParam: string): string {
  if (source.kind === "current") return currentDescendantRows(rootParam);

  const t = source.point;
  return `descendants(identifier) AS (
      SELECT c.identifier FROM resource_history c
       WHERE c.parent_identifier = ${rootParam} AND c.tx_from <= ${t} AND c.tx_to > ${t} AND NOT c.is_deleted
      UNION
      SELECT c.identifier FROM descendants d
       CROSS JOIN LATERAL (SELECT c.identifier FROM resource_history c
                            WHERE c.parent_identifier = d.identifier AND c.tx_from <= ${t} AND c.tx_to > ${t} AND NOT c.is_deleted OFFSET 0) c)`;
}

/** Walks below this many levels are cut (the tree checks keep every committed tree far shallower). */
const WALK_GUARD = 100_000;

/**
 * Now: a CTE `descendants` of whole `resources` rows (every column, plus
 * __hop), so a query reads them `FROM descendants r` with no second lookup
 * of each row by key. A step probes the parent index only below a node the
 * stored tree counts (tree_counts) say has active children: in a tree
 * whose leaves are most of it (files), most probes would find nothing.
 * A committed tree has no cycle (the tree checks refuse one), so the walk
 * needs no UNION; the hop count only bounds it.
 */
function currentDescendantRows(rootParam: string): string {
  return `descendants AS (
      SELECT c.*, 1 AS __hop FROM resources c WHERE c.parent_identifier = ${rootParam} AND NOT c.is_deleted
      UNION ALL
      SELECT c.*, d.__hop + 1 FROM descendants d
       CROSS JOIN LATERAL (SELECT c.* FROM resources c
                            WHERE c.parent_identifier = d.identifier AND NOT c.is_deleted
                              AND EXISTS (SELECT 1 FROM tree_counts t WHERE t.node = d.identifier AND t.children > 0) OFFSET 0) c
       WHERE d.__hop < ${WALK_GUARD})`;
}
