// Batch update: read the stored rows once, merge and validate in memory,
// write every changed row in one statement (the replaced versions move to
// the history by the trigger of migration 0006), then check the parents.
import { failedPrecondition, invalidArgument } from "../errors.js";
import {
  checkAccessLevel,
  checkIdentifier,
  checkIdentifiers,
  mergePayload,
  normalizePayload,
  payloadTypeOrThrow,
} from "../schema/validate.js";
import { checkTree, DEFAULT_MAX_TREE_DEPTH } from "./tree-checks.js";
import type { Caller } from "../access/index.js";
import { abortedVersionMismatch } from "../errors.js";
import {
  attributionMayChange,
  checkWithinGrants,
  maintainAttribution,
  refuseInvisible,
  refuseInvisibleParents,
} from "./attribution.js";
import type { Db } from "./db.js";
import { jsonEqual } from "./json-equal.js";
import { listIds, tickClock, type WritableRow } from "./sql.js";
import type { MutationResult, ResourcePatch } from "./types.js";

interface CurrentRow extends WritableRow {
  is_deleted: boolean;
}

interface StoredRow extends CurrentRow {
  version: string;
}

/** Checks what does not depend on the stored state (invalid_argument). */
function prepareUpdate(updates: Iterable<readonly [string, ResourcePatch]>): Map<string, ResourcePatch> {
  const out = new Map<string, ResourcePatch>();
  for (const [id, patch] of updates) {
    checkIdentifier(id);
    if (out.has(id))
      throw invalidArgument(`identifier ${id} appears more than once in the batch`, "DUPLICATE_IDENTIFIER");
    if (patch.payloadType !== undefined) payloadTypeOrThrow(patch.payloadType);
    if (patch.parentIdentifier !== undefined && patch.parentIdentifier !== null) {
      checkIdentifier(patch.parentIdentifier, "parent_identifier");
      if (patch.parentIdentifier === id) throw invalidArgument(`${id} cannot be its own parent`, "SELF_PARENT");
    }
    if (patch.accessLevel !== undefined) {
      if (patch.accessLevel === null) throw invalidArgument("access_level cannot be cleared");
      checkAccessLevel(patch.accessLevel);
    }
    if (patch.derivedFrom !== undefined) checkIdentifiers(patch.derivedFrom, "derived_from");
    if (
      patch.expectedVersion !== undefined &&
      (!Number.isSafeInteger(patch.expectedVersion) || patch.expectedVersion < 1)
    ) {
      throw invalidArgument(`${id}: expected_version must be a version (1 or more), got ${patch.expectedVersion}`);
    }
    if (patch.payload !== undefined && patch.payloadType !== undefined) {
      // Field names are known already when the type is named.
      const type = payloadTypeOrThrow(patch.payloadType);
      for (const k of Object.keys(patch.payload)) {
        if (!type.fieldByName.has(k))
          throw invalidArgument(`${type.name} has no field ${JSON.stringify(k)}`, "UNKNOWN_FIELD");
      }
    }
    out.set(id, patch);
  }
  return out;
}

function changesContent(p: ResourcePatch): boolean {
  return (
    p.parentIdentifier !== undefined ||
    p.license !== undefined ||
    p.accessLevel !== undefined ||
    p.derivedFrom !== undefined ||
    (p.payload !== undefined && Object.keys(p.payload).length > 0)
  );
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/**
 * Applies `updates` as one transaction: every version it writes names
 * `caller.actor`, and it touches only what `caller.grants` may see.
 */
export async function updateResources(
  db: Db,
  caller: Caller,
  updates: Iterable<readonly [string, ResourcePatch]>,
  maxTreeDepth = DEFAULT_MAX_TREE_DEPTH,
): Promise<MutationResult> {
  const { grants } = caller;
  const patches = prepareUpdate(updates);
  const ids = [...patches.keys()];
  return db.transaction(async (tx) => {
    const at = await tickClock(tx);
    if (ids.length === 0) return { count: 0, at };
    // What the caller may not see answers as unknown (docs/contract/18-access.md),
    // before any version is compared: a hidden resource's version says nothing.
    await refuseInvisible(tx, grants, ids);
    // Read after tickClock: writers are serialised on the clock row until
    // commit, so the versions seen here are the ones this write replaces
    // (expected_version cannot race another writer).
    const { rows } = await tx.query<StoredRow>(
      `SELECT identifier, payload_type, parent_identifier, license, access_level, derived_from, payload, is_deleted,
          version::text AS version
         FROM resources WHERE identifier = ANY($1::text[])`,
      [ids],
    );
    const current = new Map(rows.map((r) => [r.identifier, r]));
    const unknown = ids.filter((id) => !current.has(id));
    if (unknown.length > 0) throw failedPrecondition(`unknown identifiers: ${listIds(unknown)}`, "UNKNOWN_IDENTIFIER");
    const stale = ids.filter((id) => {
      const want = patches.get(id)?.expectedVersion;
      return want !== undefined && Number(current.get(id)?.version) !== want;
    });
    if (stale.length > 0) throw abortedVersionMismatch(stale);

    const next: (CurrentRow & { newly_deleted: boolean })[] = [];
    const changedParents: string[] = [];
    for (const [id, patch] of patches) {
      const cur = current.get(id) as CurrentRow;
      if (patch.payloadType !== undefined && patch.payloadType !== cur.payload_type) {
        throw failedPrecondition(
          `${id} is a ${cur.payload_type}; its payload_type cannot change to ${patch.payloadType}`,
          "PAYLOAD_TYPE_CHANGED",
        );
      }
      const isDeleted = patch.isDeleted ?? cur.is_deleted;
      let payload = cur.payload;
      if (patch.payload !== undefined && Object.keys(patch.payload).length > 0) {
        const type = payloadTypeOrThrow(cur.payload_type);
        payload = normalizePayload(type, mergePayload(cur.payload, patch.payload));
      }
      if (cur.is_deleted && isDeleted && changesContent(patch)) {
        throw failedPrecondition(`${id} is deleted; restore it (is_deleted: false) to change it`, "TOMBSTONED");
      }
      const row = {
        identifier: id,
        payload_type: cur.payload_type,
        parent_identifier: patch.parentIdentifier === undefined ? cur.parent_identifier : patch.parentIdentifier,
        license: patch.license === undefined ? cur.license : patch.license,
        access_level: patch.accessLevel ?? cur.access_level,
        derived_from: patch.derivedFrom === undefined ? cur.derived_from : [...patch.derivedFrom],
        payload,
        is_deleted: isDeleted,
        newly_deleted: isDeleted && !cur.is_deleted,
      };
      const changed =
        row.is_deleted !== cur.is_deleted ||
        row.parent_identifier !== cur.parent_identifier ||
        row.license !== cur.license ||
        row.access_level !== cur.access_level ||
        !sameList(row.derived_from, cur.derived_from) ||
        !jsonEqual(row.payload, cur.payload);
      if (!changed) continue;
      if (row.parent_identifier !== null && row.parent_identifier !== cur.parent_identifier) changedParents.push(id);
      next.push(row);
    }
    if (next.length === 0) return { count: 0, at };
    // A new parent the caller may not see is a missing one, whatever the tree checks would say of it.
    const moved = new Set(changedParents);
    await refuseInvisibleParents(
      tx,
      grants,
      next.filter((r) => moved.has(r.identifier)).map((r) => [r.identifier, r.parent_identifier as string] as const),
    );

    await tx.query(
      `WITH t AS (SELECT last FROM clock)
       UPDATE resources r SET parent_identifier = x.parent_identifier, license = x.license,
          access_level = x.access_level, derived_from = coalesce(x.derived_from, '{}'), payload = x.payload,
          is_deleted = x.is_deleted,
          deleted_by = CASE WHEN NOT x.is_deleted THEN NULL WHEN x.newly_deleted THEN t.last ELSE r.deleted_by END,
          updated_at = t.last, version = r.version + 1, actor = $2::text
         FROM jsonb_to_recordset($1::text::jsonb) AS x(identifier text, parent_identifier text, license text,
            access_level text, derived_from text[], payload jsonb, is_deleted boolean, newly_deleted boolean), t
        WHERE r.identifier = x.identifier`,
      [JSON.stringify(next), caller.actor],
    );
    // A re-parented resource takes its subtree with it.
    await checkTree(tx, changedParents, { max: maxTreeDepth, descendants: true, parentsSet: changedParents });
    // Access: attribution kept (a re-parent moves the subtree), then everything written within the grants.
    await maintainAttribution(
      tx,
      next.filter((r) => attributionMayChange(current.get(r.identifier), r)).map((r) => r.identifier),
      grants,
    );
    await checkWithinGrants(
      tx,
      grants,
      next.map((r) => r.identifier),
      changedParents,
    );
    return { count: next.length, at };
  });
}
