// The stored tree counts (migrations/0020-tree-counts.ts) are kept by
// triggers on `resources` in each write's own transaction. A bulk load that
// writes rows wholesale (a restored dump) turns them off for its transaction
// and rebuilds the counts once at the end instead.
import type { Queryable } from "./db.js";

/** Turns the triggers off until the end of the transaction `tx` (SET LOCAL); call rebuildTreeCounts before it commits. */
export async function pauseTreeCounts(tx: Queryable): Promise<void> {
  await tx.query("SELECT set_config('resource_store.tree_counts', 'off', true)");
}

/** Recomputes every stored count from the current rows (set-based, one tree level a step), and turns the triggers back on. */
export async function rebuildTreeCounts(tx: Queryable): Promise<void> {
  await tx.query("SELECT tree_counts_rebuild()");
  await tx.query("SELECT set_config('resource_store.tree_counts', 'on', true)");
}
