// Delete and restore. A delete stamps every row it tombstones with the
// transaction's clock value (deleted_by); a cascading restore follows the
// children that carry the same stamp, which makes it the exact inverse of
// that delete and nothing more.
import { checkIdentifiers } from "../schema/validate.js";
import type { Db } from "./db.js";
import { checkTree, DEFAULT_MAX_TREE_DEPTH } from "./tree-checks.js";
import { tickClock } from "./sql.js";
import type { MutationResult } from "./types.js";

export async function deleteResources(db: Db, identifiers: readonly string[], cascade: boolean): Promise<MutationResult> {
  const ids = [...new Set(checkIdentifiers(identifiers))];
  return db.transaction(async (tx) => {
    const at = await tickClock(tx);
    if (ids.length === 0) return { count: 0, at };
    // The active subtree: the walk stops at tombstoned rows.
    const { rows } = await tx.query<{ identifier: string }>(
      `WITH RECURSIVE sub(identifier) AS (
          SELECT identifier FROM resources WHERE identifier = ANY($1::text[]) AND NOT is_deleted
          UNION
          SELECT c.identifier FROM sub JOIN resources c ON c.parent_identifier = sub.identifier
           WHERE $2::boolean AND NOT c.is_deleted
       ), t AS (SELECT last FROM clock)
       UPDATE resources r SET is_deleted = true, deleted_by = t.last, updated_at = t.last, version = r.version + 1
         FROM sub, t WHERE r.identifier = sub.identifier
       RETURNING r.identifier`,
      [ids, cascade],
    );
    return finish(rows, at);
  });
}

export async function restoreResources(db: Db, identifiers: readonly string[], cascade: boolean, maxTreeDepth = DEFAULT_MAX_TREE_DEPTH): Promise<MutationResult> {
  const ids = [...new Set(checkIdentifiers(identifiers))];
  return db.transaction(async (tx) => {
    const at = await tickClock(tx);
    if (ids.length === 0) return { count: 0, at };
    const { rows } = await tx.query<{ identifier: string }>(
      `WITH RECURSIVE sub(identifier, deleted_by) AS (
          SELECT identifier, deleted_by FROM resources WHERE identifier = ANY($1::text[]) AND is_deleted
          UNION
          SELECT c.identifier, c.deleted_by FROM sub JOIN resources c ON c.parent_identifier = sub.identifier
           WHERE $2::boolean AND c.is_deleted AND c.deleted_by = sub.deleted_by
       ), t AS (SELECT last FROM clock)
       UPDATE resources r SET is_deleted = false, deleted_by = NULL, updated_at = t.last, version = r.version + 1
         FROM (SELECT DISTINCT identifier FROM sub) s, t WHERE r.identifier = s.identifier
       RETURNING r.identifier`,
      [ids, cascade],
    );
    // A restore sets no parent: only the depth of what comes back (with what it brings back below it).
    await checkTree(
      tx,
      rows.map((r) => r.identifier),
      { max: maxTreeDepth, descendants: true, parentsSet: [] },
    );
    return finish(rows, at);
  });
}

function finish(rows: readonly { identifier: string }[], at: string): MutationResult {
  // The tombstoned or restored rows' previous versions moved to the history
  // in the same statement (the trigger of migration 0006).
  return { count: rows.length, at };
}
