// Batch create: one transaction, a handful of set-based statements whatever
// the batch size.
import { failedPrecondition, invalidArgument } from "../errors.js";
import {
  DEFAULT_ACCESS_LEVEL,
  checkAccessLevel,
  checkIdentifier,
  checkIdentifiers,
  normalizePayload,
  payloadTypeOrThrow,
} from "../schema/validate.js";
import type { Caller } from "../access/index.js";
import { checkWithinGrants, maintainAttribution, refuseInvisibleParents } from "./attribution.js";
import type { Db } from "./db.js";
import { listIds, tickClock, type WritableRow } from "./sql.js";
import type { MutationResult, NewResource } from "./types.js";
import { checkTree, DEFAULT_MAX_TREE_DEPTH } from "./tree-checks.js";

type CreateRow = WritableRow;

/** Checks everything that does not depend on what is stored (invalid_argument). */
function prepareCreate(items: readonly NewResource[]): CreateRow[] {
  const seen = new Set<string>();
  const rows = items.map((item): CreateRow => {
    const identifier = checkIdentifier(item.identifier);
    if (seen.has(identifier))
      throw invalidArgument(`identifier ${identifier} appears more than once in the batch`, "DUPLICATE_IDENTIFIER");
    seen.add(identifier);
    const type = payloadTypeOrThrow(item.payloadType);
    const parent = item.parentIdentifier ?? null;
    if (parent !== null) {
      checkIdentifier(parent, "parent_identifier");
      if (parent === identifier) throw invalidArgument(`${identifier} cannot be its own parent`, "SELF_PARENT");
    }
    return {
      identifier,
      payload_type: type.name,
      parent_identifier: parent,
      license: item.license ?? null,
      access_level: item.accessLevel === undefined ? DEFAULT_ACCESS_LEVEL : checkAccessLevel(item.accessLevel),
      derived_from: checkIdentifiers(item.derivedFrom ?? [], "derived_from"),
      payload: normalizePayload(type, item.payload, { canonical: item.canonicalPayload === true }),
    };
  });
  return rows;
}

/**
 * Creates `items` as one transaction: every version it writes names
 * `caller.actor`, and everything it writes must lie within `caller.grants`.
 */
export async function createResources(
  db: Db,
  caller: Caller,
  items: readonly NewResource[],
  maxTreeDepth = DEFAULT_MAX_TREE_DEPTH,
): Promise<MutationResult> {
  const { grants } = caller;
  const rows = prepareCreate(items);
  // Built before the clock is taken: writers wait for each other on the clock row.
  const input = JSON.stringify(rows);
  return db.transaction(async (tx) => {
    const at = await tickClock(tx);
    if (rows.length === 0) return { count: 0, at };
    const ids = rows.map((r) => r.identifier);
    // Over a tombstone the row is taken over (history kept, version goes on);
    // over an active row nothing happens, and the missing RETURNING row tells.
    const { rows: written } = await tx.query<{ identifier: string; over: boolean }>(
      `WITH input AS (
          SELECT * FROM jsonb_to_recordset($1::text::jsonb) AS x(identifier text, payload_type text,
            parent_identifier text, license text, access_level text, derived_from text[], payload jsonb)
       ), t AS (SELECT last FROM clock)
       INSERT INTO resources AS r (identifier, payload_type, parent_identifier, license, access_level,
          derived_from, payload, created_at, updated_at, version, is_deleted, deleted_by, actor)
       SELECT i.identifier, i.payload_type, i.parent_identifier, i.license, i.access_level,
          coalesce(i.derived_from, '{}'), i.payload, t.last, t.last, 1, false, NULL, $2::text
         FROM input i CROSS JOIN t
       ON CONFLICT (identifier) DO UPDATE SET
          payload_type = excluded.payload_type, parent_identifier = excluded.parent_identifier,
          license = excluded.license, access_level = excluded.access_level,
          derived_from = excluded.derived_from, payload = excluded.payload,
          created_at = excluded.created_at, updated_at = excluded.updated_at,
          version = r.version + 1, is_deleted = false, deleted_by = NULL, actor = excluded.actor
        WHERE r.is_deleted
       RETURNING r.identifier, r.version > 1 AS over`,
      [input, caller.actor],
    );
    if (written.length !== rows.length) {
      const done = new Set(written.map((w) => w.identifier));
      const active = ids.filter((id) => !done.has(id));
      throw failedPrecondition(`already active: ${listIds(active)}`, "IDENTIFIER_ACTIVE");
    }
    const withParent = rows.filter((r) => r.parent_identifier !== null).map((r) => r.identifier);
    // A parent outside the batch that the caller may not see is a missing one, whatever the tree checks would say of it.
    const inBatch = new Set(ids);
    await refuseInvisibleParents(
      tx,
      grants,
      rows.flatMap((r) =>
        r.parent_identifier === null || inBatch.has(r.parent_identifier)
          ? []
          : [[r.identifier, r.parent_identifier] as const],
      ),
    );
    await checkTree(tx, ids, { max: maxTreeDepth, descendants: false, parentsSet: withParent });
    // Access (docs/contract/18-access.md): attribution kept, then everything written within the grants.
    // Over a tombstone the new resource replaces the tombstone's datasource; only what lies below it moves.
    await maintainAttribution(tx, ids, grants, {
      created: new Set(written.filter((w) => w.over).map((w) => w.identifier)),
    });
    await checkWithinGrants(tx, grants, ids, withParent);
    return { count: rows.length, at };
  });
}
