// Keeps resources.datasource_id and resource_attribution (migration 0015)
// true after a write, inside the write's transaction, and checks that a
// write stays within the caller's grants (docs/contract/18-access.md). Called once at
// the end of each write transaction that may change attribution (a create,
// an update), after the tree checks, so the tree it walks has no cycle.
//
// Attribution (section 8): a patient's payload datasource_id; a `datasource`
// resource's own identifier; else the nearest patient ancestor's (through
// tombstoned ancestors too). What a resource hands down to its children is
// its own datasource_id if a patient, else what its parent hands down (a
// `datasource` resource hands down its parent's, not itself).
import type { Grants } from "../access/index.js";
import { failedPrecondition, outsideGrants } from "../errors.js";
import type { Queryable } from "./db.js";
import { listIds } from "./sql.js";
import { visibleNow } from "./visibility.js";

/** Walks longer than this are cut (the tree checks bound the depth far below it). */
const WALK_GUARD = 100_000;

// $1: the identifiers written. `up` finds what each distinct parent of them
// hands down (walking up to the first patient or a root: one walk per
// parent, however many children a batch writes under it); `down` carries
// the new values into the subtrees, but only below a resource whose value
// changed (or a `datasource` resource, whose handed-down value is not
// stored). Every value comes from the tree as it now is, never from a
// stored datasource_id, so the order of the writes does not matter.
const MAINTAIN = `WITH RECURSIVE
  given AS MATERIALIZED (
    SELECT r.identifier, r.parent_identifier, r.payload_type, r.payload, r.datasource_id, r.version
      FROM unnest($1::text[]) AS i(id)
     CROSS JOIN LATERAL (SELECT identifier, parent_identifier, payload_type, payload, datasource_id, version FROM resources
                          WHERE identifier = i.id LIMIT 1) r
  ),
  up(start, cur, ds, done, n) AS (
    SELECT p.identifier, p.parent_identifier,
           CASE WHEN p.payload_type = 'patient' THEN p.payload->>'datasource_id' END,
           p.payload_type = 'patient' OR p.parent_identifier IS NULL, 0
      FROM (SELECT DISTINCT parent_identifier AS id FROM given WHERE parent_identifier IS NOT NULL) d
     CROSS JOIN LATERAL (SELECT identifier, parent_identifier, payload_type, payload FROM resources
                          WHERE identifier = d.id LIMIT 1) p
    UNION ALL
    SELECT u.start, p.parent_identifier,
           CASE WHEN p.payload_type = 'patient' THEN p.payload->>'datasource_id' END,
           p.payload_type = 'patient' OR p.parent_identifier IS NULL, u.n + 1
      FROM up u
     CROSS JOIN LATERAL (SELECT parent_identifier, payload_type, payload FROM resources
                          WHERE identifier = u.cur LIMIT 1) p
     WHERE NOT u.done AND u.n < ${WALK_GUARD}
  ),
  handed(identifier, ds) AS (SELECT start, ds FROM up WHERE done),
  base AS (
    SELECT g.identifier, g.payload_type, g.datasource_id, g.version,
           CASE WHEN g.payload_type = 'patient' THEN g.payload->>'datasource_id' ELSE h.ds END AS ds
      FROM given g LEFT JOIN handed h ON h.identifier = g.parent_identifier
  ),
  down(identifier, ds, attr, stored, go) AS (
    -- A first version (a fresh create) has no children but those written
    -- with it, which are rows of base themselves: no walk below it.
    SELECT b.identifier, b.ds,
           CASE WHEN b.payload_type = 'datasource' THEN b.identifier ELSE b.ds END, b.datasource_id,
           b.version > 1 AND (b.payload_type = 'datasource' OR b.datasource_id IS DISTINCT FROM
             (CASE WHEN b.payload_type = 'datasource' THEN b.identifier ELSE b.ds END))
      FROM base b
    UNION
    SELECT c.identifier, d.ds,
           CASE WHEN c.payload_type = 'datasource' THEN c.identifier ELSE d.ds END, c.datasource_id,
           c.payload_type = 'datasource' OR c.datasource_id IS DISTINCT FROM
             (CASE WHEN c.payload_type = 'datasource' THEN c.identifier ELSE d.ds END)
      FROM down d
     CROSS JOIN LATERAL (SELECT identifier, payload_type, datasource_id FROM resources
                          WHERE parent_identifier = d.identifier AND payload_type <> 'patient' OFFSET 0) c
     WHERE d.go
  ),
  changes AS MATERIALIZED (
    SELECT DISTINCT identifier, attr FROM down WHERE stored IS DISTINCT FROM attr
  ),
  -- Rows taken by primary key (= ANY of an array), as the other writes do:
  -- a join with the CTE may be planned as a scan of the whole table.
  set_now AS (
    UPDATE resources r SET datasource_id = ch.attr FROM changes ch
     WHERE r.identifier = ANY (ARRAY(SELECT identifier FROM changes)) AND r.identifier = ch.identifier
    RETURNING 1
  ),
  closed AS (
    UPDATE resource_attribution a SET tx_to = (SELECT last FROM clock)
     WHERE a.identifier = ANY (ARRAY(SELECT identifier FROM changes)) AND a.tx_to = 'infinity'
    RETURNING 1
  ),
  opened AS (
    INSERT INTO resource_attribution (identifier, datasource_id, tx_from, tx_to)
    SELECT identifier, attr, (SELECT last FROM clock), 'infinity' FROM changes WHERE attr IS NOT NULL
    RETURNING 1
  )
SELECT (SELECT count(*) FROM set_now)::int AS n, (SELECT count(*) FROM closed)::int AS closed, (SELECT count(*) FROM opened)::int AS opened`;

/**
 * Brings the attribution of the resources `ids` (just written in this
 * transaction) and of everything below them up to date, stamped with the
 * transaction's clock. Call once per transaction, after the writes.
 */
export async function maintainAttribution(tx: Queryable, ids: readonly string[]): Promise<void> {
  if (ids.length === 0) return;
  await tx.query(MAINTAIN, [[...new Set(ids)]]);
}

/** Whether an update from `before` to `after` may change attribution: a new parent, or a patient's new datasource_id. */
export function attributionMayChange(
  before: { parent_identifier: string | null; payload: Readonly<Record<string, unknown>> } | undefined,
  after: { payload_type: string; parent_identifier: string | null; payload: Readonly<Record<string, unknown>> },
): boolean {
  if (before === undefined || before.parent_identifier !== after.parent_identifier) return true;
  return after.payload_type === "patient" && before.payload["datasource_id"] !== after.payload["datasource_id"];
}

/**
 * Before a write: the identifiers of `ids` the caller may not see now (or
 * that do not exist), so the write can answer for them as for unknown ones.
 */
export async function invisibleOf(tx: Queryable, grants: Grants, ids: readonly string[]): Promise<string[]> {
  const pred = visibleNow(grants, "r");
  if (pred === undefined || ids.length === 0) return [];
  const { rows } = await tx.query<{ identifier: string }>(
    `SELECT i.id AS identifier FROM unnest($1::text[]) AS i(id)
      WHERE EXISTS (SELECT 1 FROM resources r WHERE r.identifier = i.id AND NOT ${pred})`,
    [[...new Set(ids)]],
  );
  return rows.map((r) => r.identifier);
}

/** An update of identifiers the caller may not see answers as one of unknown identifiers. */
export async function refuseInvisible(tx: Queryable, grants: Grants, ids: readonly string[]): Promise<void> {
  const hidden = await invisibleOf(tx, grants, ids);
  if (hidden.length > 0) throw failedPrecondition(`unknown identifiers: ${listIds(hidden)}`, "UNKNOWN_IDENTIFIER");
}

/**
 * Before a write: a new parent the caller may not see answers as a missing
 * one (400 DANGLING_PARENT), before the tree checks run, so that a move
 * under a hidden resource never answers CYCLE or TREE_TOO_DEEP, which would
 * tell that it exists and where it sits. `moves` are [child, new parent].
 */
export async function refuseInvisibleParents(tx: Queryable, grants: Grants, moves: readonly (readonly [string, string])[]): Promise<void> {
  if (moves.length === 0) return;
  const hidden = new Set(await invisibleOf(tx, grants, moves.map(([, parent]) => parent)));
  const refused = moves.filter(([, parent]) => hidden.has(parent));
  if (refused.length > 0) {
    throw failedPrecondition(`parent is not an active resource: ${listIds(refused.map(([child, parent]) => `${child} -> ${parent}`))}`, "DANGLING_PARENT");
  }
}

/**
 * After a write (and maintainAttribution): every resource written must be one
 * the caller may see, else 403 OUTSIDE_GRANTS and the transaction rolls back;
 * a parent just set that the caller may not see answers as a missing parent.
 */
export async function checkWithinGrants(tx: Queryable, grants: Grants, ids: readonly string[], parentsSet: readonly string[]): Promise<void> {
  const pred = visibleNow(grants, "r");
  if (pred === undefined || ids.length === 0) return;
  const { rows } = await tx.query<{ identifier: string; kind: "parent" | "self"; parent: string | null }>(
    `SELECT r.identifier, 'parent' AS kind, r.parent_identifier AS parent
       FROM resources r JOIN resources p ON p.identifier = r.parent_identifier
      WHERE r.identifier = ANY($2::text[]) AND NOT ${visibleNow(grants, "p") ?? "true"}
     UNION ALL
     SELECT r.identifier, 'self', NULL FROM resources r WHERE r.identifier = ANY($1::text[]) AND NOT ${pred}`,
    [[...new Set(ids)], [...new Set(parentsSet)]],
  );
  const parents = rows.filter((r) => r.kind === "parent");
  if (parents.length > 0) {
    throw failedPrecondition(
      `parent is not an active resource: ${listIds(parents.map((p) => `${p.identifier} -> ${p.parent ?? ""}`))}`,
      "DANGLING_PARENT",
    );
  }
  if (rows.length > 0) throw outsideGrants(rows.map((r) => r.identifier));
}

/**
 * Recomputes every resource's attribution, now and over its whole history,
 * from the versions (as migration 18 backfills it, but with adjacent periods
 * of one datasource merged, so the rows equal those the writes would have
 * kept): for writes that load versions wholesale (a restored dump) instead
 * of going through the writes.
 */
export async function rebuildAttribution(tx: Queryable): Promise<void> {
  await tx.exec(`
    DELETE FROM resource_attribution;
    UPDATE resources SET datasource_id = NULL WHERE datasource_id IS NOT NULL;
    CREATE TEMPORARY TABLE attribution_backfill ON COMMIT DROP AS
    WITH RECURSIVE prop(identifier, payload_type, f, t, ds) AS (
      SELECT v.identifier, v.payload_type, v.tx_from, v.tx_to,
             CASE WHEN v.payload_type = 'patient' THEN v.payload->>'datasource_id' END
        FROM resource_history v
       WHERE v.payload_type = 'patient' OR v.parent_identifier IS NULL
      UNION ALL
      SELECT v.identifier, v.payload_type, greatest(v.tx_from, p.f), least(v.tx_to, p.t), p.ds
        FROM prop p JOIN resource_history v ON v.parent_identifier = p.identifier
         AND v.tx_from < p.t AND v.tx_to > p.f
       WHERE v.payload_type <> 'patient'
    )
    SELECT identifier, CASE WHEN payload_type = 'datasource' THEN identifier ELSE ds END AS ds, f, t FROM prop;
    -- One period per stretch of one datasource, as the writes keep it (they
    -- open a period only when the value changes): versions that follow each
    -- other under the same datasource are merged.
    INSERT INTO resource_attribution (identifier, datasource_id, tx_from, tx_to)
    SELECT identifier, ds, min(f), max(t)
      FROM (SELECT identifier, ds, f, t, sum(brk) OVER (PARTITION BY identifier ORDER BY f) AS island
              FROM (SELECT identifier, ds, f, t,
                           CASE WHEN lag(t) OVER w = f AND lag(ds) OVER w = ds THEN 0 ELSE 1 END AS brk
                      FROM attribution_backfill
                     WHERE ds IS NOT NULL AND f < t
                    WINDOW w AS (PARTITION BY identifier ORDER BY f)) x) y
     GROUP BY identifier, ds, island;
    UPDATE resources r SET datasource_id = b.ds FROM attribution_backfill b
     WHERE b.identifier = r.identifier AND b.t = 'infinity' AND b.ds IS NOT NULL;
    DROP TABLE attribution_backfill;`);
}
