// The one place that says where "every descendant of a parent" comes from.
// Today both the current state and as_of reads walk the parent edges with a
// recursive CTE; a lineage closure view can later serve the current case
// here without touching the compiler.

/** Where the rows of a query are read: the current table, or the history at a point. */
export type RowSource = { readonly kind: "current" } | { readonly kind: "history"; readonly point: string };

/**
 * A CTE body `descendants(identifier)`: every resource below `rootParam`
 * (a bound parameter), tombstoned intermediates included so an active
 * grandchild under a tombstoned child still counts (the caller filters
 * tombstones on the result). UNION stops on a cycle instead of looping.
 */
export function descendantsCte(source: RowSource, rootParam: string): string {
  if (source.kind === "current") {
    return `descendants(identifier) AS (
      SELECT c.identifier FROM resources c WHERE c.parent_identifier = ${rootParam}
      UNION
      SELECT c.identifier FROM resources c JOIN descendants d ON c.parent_identifier = d.identifier)`;
  }
  const t = source.point;
  return `descendants(identifier) AS (
      SELECT c.identifier FROM resource_versions c
       WHERE c.parent_identifier = ${rootParam} AND c.tx_from <= ${t} AND c.tx_to > ${t}
      UNION
      SELECT c.identifier FROM resource_versions c JOIN descendants d ON c.parent_identifier = d.identifier
       WHERE c.tx_from <= ${t} AND c.tx_to > ${t})`;
}
