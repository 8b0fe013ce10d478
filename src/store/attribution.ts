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
import { accessRank, seesEverything, type Grants } from "../access/index.js";
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
  down(root, identifier, ds, attr, stored, go) AS (
    -- A first version (a fresh create) has no children but those written
    -- with it, which are rows of base themselves: no walk below it.
    SELECT b.identifier, b.identifier, b.ds,
           CASE WHEN b.payload_type = 'datasource' THEN b.identifier ELSE b.ds END, b.datasource_id,
           b.version > 1 AND (b.payload_type = 'datasource' OR b.datasource_id IS DISTINCT FROM
             (CASE WHEN b.payload_type = 'datasource' THEN b.identifier ELSE b.ds END))
      FROM base b
    UNION
    SELECT d.root, c.identifier, d.ds,
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
SELECT (SELECT count(*) FROM set_now)::int AS n, (SELECT count(*) FROM closed)::int AS closed, (SELECT count(*) FROM opened)::int AS opened,
       -- Every change of a datasource that was set (from -> to), with the written resource that brought it,
       -- whether it is that resource itself, and the highest level of what it moved.
       (SELECT coalesce(json_agg(m), '[]') FROM (SELECT d.root, d.stored AS "from", d.attr AS "to", d.identifier = d.root AS self,
               max(CASE lr.access_level WHEN 'restricted' THEN 2 WHEN 'internal' THEN 1 ELSE 0 END) AS rank
          FROM down d CROSS JOIN LATERAL (SELECT access_level FROM resources WHERE identifier = d.identifier LIMIT 1) lr
          WHERE d.stored IS NOT NULL AND d.stored IS DISTINCT FROM d.attr
          GROUP BY d.root, d.stored, d.attr, d.identifier = d.root) m) AS moved`;

interface Moved {
  root: string;
  from: string;
  to: string | null;
  /** The written resource itself (not one below it). */
  self: boolean;
  /** The highest accessRank of the resources moved. */
  rank: number;
}

/** Options of maintainAttribution. */
export interface MaintainOptions {
  /**
   * Identifiers just created over a tombstone: the tombstone's own datasource
   * is replaced by the new resource's, not moved, so only what lies below it
   * is checked (docs/access.md, create).
   */
  readonly created?: ReadonlySet<string>;
}

/**
 * Brings the attribution of the resources `ids` (just written in this
 * transaction) and of everything below them up to date, stamped with the
 * transaction's clock. Call once per transaction, after the writes.
 *
 * A caller without every datasource may move resources only from one of its
 * datasources to another (docs/access.md, writes): a resource that had a
 * datasource must keep one it is granted. Else 403 OUTSIDE_GRANTS, naming
 * the written resources that would have moved it. Without this, a writer of
 * one datasource could move a study it sees to the root (or re-create a
 * tombstone of another datasource there) and so hand the study's hidden
 * descendants, which keep no datasource of their own, to the callers of
 * every datasource.
 *
 * Clearance guards a move too (docs/contract/18-access.md): a caller whose clearance is below
 * `restricted` may not move a resource above its clearance (one below the
 * resource written, which it cannot see) to another datasource or to none,
 * whatever datasources it holds; else the restricted callers of the new
 * datasource (or of every datasource) would read what its own could not.
 */
export async function maintainAttribution(
  tx: Queryable,
  ids: readonly string[],
  grants: Grants,
  options: MaintainOptions = {},
): Promise<void> {
  if (ids.length === 0) return;
  const { rows } = await tx.query<{ moved: Moved[] }>(MAINTAIN, [[...new Set(ids)]]);
  if (seesEverything(grants)) return;
  const granted = grants.datasources;
  const clearance = accessRank(grants.clearance);
  const refused = (rows[0]?.moved ?? []).filter(
    (m) =>
      !(m.self && options.created?.has(m.root) === true) &&
      // Clearance (docs/contract/18-access.md): a resource above it moved to other readers, by a writer that cannot see it.
      (m.rank > clearance || (granted !== "all" && (!granted.has(m.from) || m.to === null || !granted.has(m.to)))),
  );
  if (refused.length > 0) throw outsideGrants([...new Set(refused.map((m) => m.root))]);
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
async function invisibleOf(tx: Queryable, grants: Grants, ids: readonly string[]): Promise<string[]> {
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
export async function refuseInvisibleParents(
  tx: Queryable,
  grants: Grants,
  moves: readonly (readonly [string, string])[],
): Promise<void> {
  if (moves.length === 0) return;
  const hidden = new Set(
    await invisibleOf(
      tx,
      grants,
      moves.map(([, parent]) => parent),
    ),
  );
  const refused = moves.filter(([, parent]) => hidden.has(parent));
  if (refused.length > 0) {
    throw failedPrecondition(
      `parent is not an active resource: ${listIds(refused.map(([child, parent]) => `${child} -> ${parent}`))}`,
      "DANGLING_PARENT",
    );
  }
}

/**
 * After a write (and maintainAttribution): every resource written must be one
 * the caller may see, else 403 OUTSIDE_GRANTS and the transaction rolls back;
 * a parent just set that the caller may not see answers as a missing parent.
 */
export async function checkWithinGrants(
  tx: Queryable,
  grants: Grants,
  ids: readonly string[],
  parentsSet: readonly string[],
): Promise<void> {
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

/** Islands of `src`'s pieces: adjacent periods of one identifier with the same `key` merged into one. */
const islands = (src: string, key: string, where = "true"): string => `
  SELECT identifier, ${key}, min(f) AS f, max(t) AS t
    FROM (SELECT identifier, ${key}, f, t, sum(brk) OVER (PARTITION BY identifier ORDER BY f) AS island
            FROM (SELECT identifier, ${key}, f, t,
                         CASE WHEN lag(t) OVER w = f AND lag(${key}) OVER w IS NOT DISTINCT FROM ${key} THEN 0 ELSE 1 END AS brk
                    FROM ${src} WHERE ${where} AND f < t
                  WINDOW w AS (PARTITION BY identifier ORDER BY f)) x) y
   GROUP BY identifier, ${key}, island`;

/**
 * Recomputes every resource's attribution, now and over its whole history,
 * from the versions (as migration 18 backfills it, but with adjacent periods
 * of one datasource merged, so the rows equal those the writes would have
 * kept): for writes that load versions wholesale (a restored dump) instead
 * of going through the writes.
 *
 * Set-based, one tree level a step: level 0 is every version of a patient or
 * a root (what it hands down is its own); level k+1 the versions of children
 * cut by the periods of level k's pieces of their parent. Each level's
 * pieces are merged into islands of one handed-down value before they are
 * carried a level down, so a child version is cut by its parent's changes
 * of datasource, not by each of its parent's versions (a recursive walk of
 * the versions made one piece per overlapping pair: 181,000 for 100,000
 * versions under patients of ten versions each). At each instant a resource
 * has one ancestor chain, so every instant of a resource is covered by one
 * piece of one level. The walk stops when a level has no piece, or past
 * WALK_GUARD levels.
 */
export async function rebuildAttribution(tx: Queryable): Promise<void> {
  await tx.exec(`
    DELETE FROM resource_attribution;
    UPDATE resources SET datasource_id = NULL WHERE datasource_id IS NOT NULL;
    CREATE TEMPORARY TABLE attribution_children ON COMMIT DROP AS
      SELECT identifier, parent_identifier AS parent, payload_type = 'datasource' AS is_datasource, tx_from AS f, tx_to AS t
        FROM resource_history WHERE payload_type <> 'patient' AND parent_identifier IS NOT NULL;
    -- ds: what the piece hands down; own: the attribution it records (a datasource records itself).
    CREATE TEMPORARY TABLE attribution_pieces ON COMMIT DROP AS
      SELECT identifier, CASE WHEN payload_type = 'patient' THEN payload->>'datasource_id' END AS ds,
             CASE WHEN payload_type = 'patient' THEN payload->>'datasource_id' WHEN payload_type = 'datasource' THEN identifier END AS own,
             tx_from AS f, tx_to AS t
        FROM resource_history WHERE payload_type = 'patient' OR parent_identifier IS NULL;
    CREATE TEMPORARY TABLE attribution_level ON COMMIT DROP AS ${islands("attribution_pieces", "ds")};
    CREATE TEMPORARY TABLE attribution_next (identifier text COLLATE "C", ds text, own text, f timestamptz, t timestamptz) ON COMMIT DROP;`);
  for (let level = 0; level < WALK_GUARD; level++) {
    const { rows } = await tx.query<{ n: number }>(`WITH next AS (
        INSERT INTO attribution_next (identifier, ds, own, f, t)
        SELECT c.identifier, p.ds, CASE WHEN c.is_datasource THEN c.identifier ELSE p.ds END, greatest(c.f, p.f), least(c.t, p.t)
          FROM attribution_children c JOIN attribution_level p ON p.identifier = c.parent AND c.f < p.t AND c.t > p.f
        RETURNING 1)
      SELECT count(*)::int AS n FROM next`);
    if ((rows[0]?.n ?? 0) === 0) break;
    await tx.exec(`
      INSERT INTO attribution_pieces SELECT * FROM attribution_next;
      TRUNCATE attribution_level;
      INSERT INTO attribution_level ${islands("attribution_next", "ds")};
      TRUNCATE attribution_next;`);
  }
  // One period per stretch of one datasource, as the writes keep it (they open a period only when the value changes).
  await tx.exec(`
    INSERT INTO resource_attribution (identifier, datasource_id, tx_from, tx_to)
    ${islands("attribution_pieces", "own", "own IS NOT NULL")};
    UPDATE resources r SET datasource_id = a.datasource_id FROM resource_attribution a
     WHERE a.identifier = r.identifier AND a.tx_to = 'infinity';
    DROP TABLE attribution_children, attribution_pieces, attribution_level, attribution_next;`);
}
