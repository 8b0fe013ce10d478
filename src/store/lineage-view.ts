// The lineage materialized view (see migrations/0004-lineage-view.ts): when
// it may answer, how it is refreshed, and the listener that keeps it fresh.
//
// Correctness never depends on the refresher: a reader uses the view only
// when, in the reader's own snapshot, no version stamped after the last
// refresh changed a parent or a tombstone; otherwise it walks the tree with a
// recursive CTE. The refresher only makes the fast path the common one.
import type { Db, Queryable } from "./db.js";
import { prepared } from "./prepared.js";

/** Notified by the resources triggers when a committed write changes the tree. */
export const LINEAGE_CHANNEL = "lineage_changed";

// An arbitrary constant naming "a lineage view refresh is running": refreshes
// from several processes queue behind one another instead of piling up.
const REFRESH_LOCK_KEY = 7_362_918_004;

/** Whether this database has the view (PostgreSQL; the embedded store has none). */
export function hasLineageView(db: Db): boolean {
  return db.capabilities.lineageView;
}

/**
 * Runs fn in one read-only REPEATABLE READ snapshot, so that several
 * statements agree with each other. `fresh` says whether lineage_closure is
 * exact in that snapshot; it is always false without the view.
 */
export async function withLineageSnapshot<T>(db: Db, fn: (q: Queryable, fresh: boolean) => Promise<T>): Promise<T> {
  return db.transaction(async (tx) => fn(tx, hasLineageView(db) ? await isLineageViewFresh(tx) : false), { readOnlySnapshot: true });
}

/**
 * True when no version stamped after the last refresh created a resource or
 * changed its parent or tombstone. A new version (current or superseded) is
 * compared with the one before it (version - 1), which is always superseded;
 * the first version of an identifier is a creation.
 */
export async function isLineageViewFresh(q: Queryable): Promise<boolean> {
  const { rows } = await q.query<{ fresh: boolean }>(FRESH);
  return rows[0]?.fresh === true;
}

// Fixed, and run by every tree listing and statistics call: prepared once per connection (issue 35).
const FRESH = prepared(`SELECT NOT EXISTS (
        SELECT 1 FROM resource_history v
          LEFT JOIN resource_versions prev ON prev.identifier = v.identifier AND prev.version = v.version - 1
         WHERE v.tx_from > s.refreshed_at
           AND (prev.identifier IS NULL OR prev.is_deleted <> v.is_deleted
                OR prev.parent_identifier IS DISTINCT FROM v.parent_identifier)
     ) AS fresh
     FROM lineage_view_state s`);

/**
 * Fills the view in the caller's transaction, which holds the only
 * snapshot that has the rows (a restore into an empty store, dump.ts): a
 * plain REFRESH, locking the view until the transaction ends, where a
 * concurrent one would compare old contents that are empty anyway.
 */
export async function refreshLineageViewIn(tx: Queryable): Promise<void> {
  await tx.query("SELECT pg_advisory_xact_lock($1::bigint)", [REFRESH_LOCK_KEY]);
  await tx.query("UPDATE lineage_view_state SET refreshed_at = (SELECT last FROM clock)");
  await tx.exec("REFRESH MATERIALIZED VIEW lineage_closure");
}

/**
 * Refreshes the view concurrently (readers keep reading the old contents).
 * With `wait: false` it gives up at once when another refresh holds the lock
 * and answers false; the caller tries again later.
 */
export async function refreshLineageView(db: Db, options: { wait?: boolean } = {}): Promise<boolean> {
  if (!hasLineageView(db)) return false;
  const wait = options.wait ?? true;
  return db.transaction(async (tx) => {
    if (wait) {
      await tx.query("SELECT pg_advisory_xact_lock($1::bigint)", [REFRESH_LOCK_KEY]);
    } else {
      const { rows } = await tx.query<{ ok: boolean }>("SELECT pg_try_advisory_xact_lock($1::bigint) AS ok", [REFRESH_LOCK_KEY]);
      if (rows[0]?.ok !== true) return false;
    }
    // The committed clock first: every version stamped at or before it is
    // committed, so the refresh below (a later snapshot) contains them all.
    await tx.query("UPDATE lineage_view_state SET refreshed_at = (SELECT last FROM clock)");
    await tx.exec("REFRESH MATERIALIZED VIEW CONCURRENTLY lineage_closure");
    return true;
  });
}
