// Delete and restore. A delete stamps every row it tombstones with the
// transaction's clock value (deleted_by); a cascading restore follows the
// children that carry the same stamp, which makes it the exact inverse of
// that delete and nothing more.
//
// The walks probe the keys from the rows already found (LATERAL with LIMIT
// or OFFSET, not flattened into joins), and the UPDATE takes its rows by
// primary key (= ANY of an array the planner cannot size, so it does not
// pick a scan): with plain joins every delete or restore of a batch read the
// whole table (test/store/write-check-plans.test.ts).
import { checkIdentifiers } from "../schema/validate.js";
import type { Caller } from "../access/index.js";
import { abortedVersionMismatch, invalidArgument } from "../errors.js";
import type { Db, Queryable } from "./db.js";
import { checkTree, DEFAULT_MAX_TREE_DEPTH } from "./tree-checks.js";
import { tickClock } from "./sql.js";
import type { MutationResult } from "./types.js";
import { andVisible, visibleNow } from "./visibility.js";

export interface TombstoneOptions {
  readonly cascade: boolean;
  /** identifier -> the version the caller last saw; any other stored version refuses the whole batch. */
  readonly expectedVersions?: ReadonlyMap<string, number>;
}

// Access (docs/contract/18-access.md): a walk takes only resources the caller may
// see, and goes on only through them; what it may not see is skipped as if
// unknown, and so is what lies below it. Every version written names caller.actor.
export async function deleteResources(
  db: Db,
  caller: Caller,
  identifiers: readonly string[],
  options: TombstoneOptions,
): Promise<MutationResult> {
  const ids = [...new Set(checkIdentifiers(identifiers))];
  const expected = checkExpectedVersions(options.expectedVersions);
  const cascade = options.cascade;
  const seen = andVisible(visibleNow(caller.grants, "resources"));
  return db.transaction(async (tx) => {
    const at = await tickClock(tx);
    await checkVersions(tx, expected, seen);
    if (ids.length === 0) return { count: 0, at };
    // The active subtree: the walk stops at tombstoned rows.
    const { rows } = await tx.query<{ identifier: string }>(
      `WITH RECURSIVE sub(identifier) AS (
          SELECT r.identifier FROM unnest($1::text[]) AS i(id)
           CROSS JOIN LATERAL (SELECT identifier FROM resources WHERE identifier = i.id AND NOT is_deleted${seen} LIMIT 1) r
          UNION
          SELECT c.identifier FROM sub
           CROSS JOIN LATERAL (SELECT identifier FROM resources
                                WHERE parent_identifier = sub.identifier AND NOT is_deleted${seen} OFFSET 0) c
           WHERE $2::boolean
       ), t AS (SELECT last FROM clock)
       UPDATE resources r SET is_deleted = true, deleted_by = t.last, updated_at = t.last, version = r.version + 1, actor = $3::text
         FROM t WHERE r.identifier = ANY (ARRAY(SELECT identifier FROM sub))
       RETURNING r.identifier`,
      [ids, cascade, caller.actor],
    );
    return finish(rows, at);
  });
}

export async function restoreResources(
  db: Db,
  caller: Caller,
  identifiers: readonly string[],
  options: TombstoneOptions,
  maxTreeDepth = DEFAULT_MAX_TREE_DEPTH,
): Promise<MutationResult> {
  const ids = [...new Set(checkIdentifiers(identifiers))];
  const expected = checkExpectedVersions(options.expectedVersions);
  const cascade = options.cascade;
  const seen = andVisible(visibleNow(caller.grants, "resources"));
  return db.transaction(async (tx) => {
    const at = await tickClock(tx);
    await checkVersions(tx, expected, seen);
    if (ids.length === 0) return { count: 0, at };
    const { rows } = await tx.query<{ identifier: string }>(
      `WITH RECURSIVE sub(identifier, deleted_by) AS (
          SELECT r.identifier, r.deleted_by FROM unnest($1::text[]) AS i(id)
           CROSS JOIN LATERAL (SELECT identifier, deleted_by FROM resources WHERE identifier = i.id AND is_deleted${seen} LIMIT 1) r
          UNION
          SELECT c.identifier, c.deleted_by FROM sub
           CROSS JOIN LATERAL (SELECT identifier, deleted_by FROM resources
                                WHERE parent_identifier = sub.identifier AND is_deleted AND deleted_by = sub.deleted_by${seen} OFFSET 0) c
           WHERE $2::boolean
       ), t AS (SELECT last FROM clock)
       UPDATE resources r SET is_deleted = false, deleted_by = NULL, updated_at = t.last, version = r.version + 1, actor = $3::text
         FROM t WHERE r.identifier = ANY (ARRAY(SELECT DISTINCT identifier FROM sub))
       RETURNING r.identifier`,
      [ids, cascade, caller.actor],
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

/** The expected versions, checked for shape (invalid_argument) before any transaction. */
function checkExpectedVersions(expected: ReadonlyMap<string, number> | undefined): ReadonlyMap<string, number> {
  if (expected === undefined || expected.size === 0) return new Map();
  checkIdentifiers([...expected.keys()], "expected_versions");
  for (const [id, v] of expected) {
    if (!Number.isSafeInteger(v) || v < 1)
      throw invalidArgument(`expected_versions[${JSON.stringify(id)}] must be a version (1 or more), got ${v}`);
  }
  return expected;
}

/**
 * Refuses the batch (aborted, VERSION_MISMATCH) unless every identifier's
 * stored version is the expected one; an identifier never created has no
 * version, so it differs too. Runs after tickClock: the clock row lock is
 * held to commit, so no other writer can change a version between this
 * check and this transaction's own writes.
 */
/**
 * Refuses the batch when a stored version differs from the expected one. A
 * resource the caller may not see (`seen`, the visibility predicate) counts
 * as never created, so the answer says nothing of its version.
 */
async function checkVersions(tx: Queryable, expected: ReadonlyMap<string, number>, seen = ""): Promise<void> {
  if (expected.size === 0) return;
  const ids = [...expected.keys()];
  const { rows } = await tx.query<{ identifier: string; version: string }>(
    `SELECT identifier, version::text AS version FROM resources WHERE identifier = ANY($1::text[])${seen}`,
    [ids],
  );
  const stored = new Map(rows.map((r) => [r.identifier, Number(r.version)]));
  const differ = ids.filter((id) => stored.get(id) !== expected.get(id));
  if (differ.length > 0) throw abortedVersionMismatch(differ);
}
