// The tree's counts, kept by the writes in their own transaction (docs/lineage.md),
// in place of the lineage materialized view of 0004 and its refresher.
//
// tree_counts(node, datasource_id, access_level, payload_type, children, descendants):
//   for each node, what lies below it, split by the class a caller's grants
//   see (docs/access.md): `children` counts its active children of that
//   datasource, level and type; `descendants` its active descendants reached
//   through active resources only (a walk stops at a tombstone, as
//   /children and a cascading delete do). A node holds rows whatever its own
//   state: a tombstone keeps the counts of what lies below it, so a restore
//   hands them up again. A node with nothing below it has no row (leaves:
//   most resources), so the table stays a small fraction of the store.
//   Current state only: an as_of read walks the history of the subtree it
//   names (store/lineage.ts).
//
// Kept by triggers on `resources`, so no writer can forget them:
// - AFTER INSERT (statement): every inserted active row adds itself to each
//   ancestor it reaches (grouped by parent and class first, then one walk
//   up per group);
// - BEFORE UPDATE (row), when a parent or a tombstone changes: the row's
//   old contribution (itself and its stored descendants) leaves the old
//   chain, the new one joins the new chain. A row trigger sees the rows the
//   same statement already changed and not the others, so applying each
//   row's change alone, in any order, keeps the counts exact (a cascade of
//   one statement stops each walk at the tombstones it already made);
// - AFTER UPDATE (statement), for rows whose class changed and nothing else
//   of the tree (a datasource moved by attribution.ts, a new level): each
//   moves its unit from the old class to the new along the chain it reaches.
//   (A row that also changed parent or tombstone is the row trigger's.)
// Every walk up is a key lookup per step; no statement reads the whole table.
// `SET LOCAL resource_store.tree_counts = 'off'` skips them for a bulk load,
// which then calls tree_counts_rebuild() (store/dump.ts).
//
// The view, its state row, its notify triggers and its index on
// resource_versions (tx_from: kept, the change feed and 0006 use it) go.
export const sql = `
DROP TRIGGER IF EXISTS resources_lineage_insert ON resources;
DROP TRIGGER IF EXISTS resources_lineage_update ON resources;
DROP TRIGGER IF EXISTS resources_lineage_delete ON resources;
DROP FUNCTION IF EXISTS lineage_notify();
DROP MATERIALIZED VIEW IF EXISTS lineage_closure;
DROP TABLE IF EXISTS lineage_view_state;

CREATE TABLE tree_counts (
  node text COLLATE "C" NOT NULL,
  datasource_id text COLLATE "C",
  access_level text NOT NULL,
  payload_type text NOT NULL,
  children bigint NOT NULL,
  descendants bigint NOT NULL,
  CONSTRAINT tree_counts_class UNIQUE NULLS NOT DISTINCT (node, datasource_id, access_level, payload_type)
);

CREATE FUNCTION tree_counts_enabled() RETURNS boolean LANGUAGE sql STABLE AS $fn$
  SELECT coalesce(current_setting('resource_store.tree_counts', true), '') <> 'off'
$fn$;

-- One row's contribution (itself in its class, plus every class stored
-- below it) added (sign 1) to or taken (sign -1) from the active chain
-- above it: the parent, then the parent's parent while the node before was
-- active, and so on (the first tombstone met is the last). One statement:
-- a key lookup per step. The path stops a cycle a failing write may leave
-- for a moment (the tree checks then refuse it).
CREATE FUNCTION tree_counts_shift(ident text, parent text, ds text, lvl text, typ text, sign bigint) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  WITH RECURSIVE reach(node, n, path) AS (
    SELECT parent COLLATE "C", 1, ARRAY[ident, parent]
    UNION ALL
    SELECT p.parent_identifier, reach.n + 1, reach.path || p.parent_identifier
      FROM reach CROSS JOIN LATERAL (SELECT parent_identifier FROM resources
                                      WHERE identifier = reach.node AND NOT is_deleted LIMIT 1) p
     WHERE p.parent_identifier IS NOT NULL AND p.parent_identifier <> ALL(reach.path) AND reach.n < 10000
  )
  INSERT INTO tree_counts AS t (node, datasource_id, access_level, payload_type, children, descendants)
  SELECT a.node, d.ds, d.lvl, d.typ, CASE WHEN a.n = 1 THEN d.own ELSE 0 END, d.n
    FROM reach a
   CROSS JOIN (
     SELECT x.ds, x.lvl, x.typ, sign * sum(x.own) AS own, sign * sum(x.n) AS n
       FROM (SELECT ds, lvl, typ, 1::bigint AS own, 1::bigint AS n
             UNION ALL
             SELECT datasource_id, access_level, payload_type, 0, descendants FROM tree_counts WHERE node = ident) x
      GROUP BY x.ds, x.lvl, x.typ
   ) d
  ON CONFLICT ON CONSTRAINT tree_counts_class DO UPDATE
    SET children = t.children + excluded.children, descendants = t.descendants + excluded.descendants;
END
$fn$;

CREATE FUNCTION tree_counts_row() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF NOT tree_counts_enabled() THEN
    RETURN NEW;
  END IF;
  IF NOT OLD.is_deleted AND OLD.parent_identifier IS NOT NULL THEN
    PERFORM tree_counts_shift(OLD.identifier, OLD.parent_identifier, OLD.datasource_id, OLD.access_level, OLD.payload_type, -1);
  END IF;
  IF NOT NEW.is_deleted AND NEW.parent_identifier IS NOT NULL THEN
    PERFORM tree_counts_shift(NEW.identifier, NEW.parent_identifier, NEW.datasource_id, NEW.access_level, NEW.payload_type, 1);
  END IF;
  RETURN NEW;
END
$fn$;

-- Units (node = the parent of the rows, class, n) carried up every chain they reach.
-- Each unit walks its own chain, so a batch that is one long chain costs its
-- length squared: the walks stop after 128 levels, twice the deepest tree
-- the tree checks let commit by default (MAX_TREE_DEPTH 64), so a refused
-- 10,000-long chain costs 10,000 x 128 steps, not 50 million. (A store
-- configured with MAX_TREE_DEPTH above 128 keeps no counts more than 128
-- levels above a resource created in a batch: docs/lineage.md.)
CREATE FUNCTION tree_counts_carry(units jsonb) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  WITH RECURSIVE u AS (
    SELECT node, ds, lvl, typ, sum(n)::bigint AS n
      FROM jsonb_to_recordset(units) AS x(node text, ds text, lvl text, typ text, n bigint)
     GROUP BY node, ds, lvl, typ
  ),
  up(node, ds, lvl, typ, n, first, steps) AS (
    SELECT node COLLATE "C", ds, lvl, typ, n, true, 0 FROM u WHERE n <> 0
    UNION ALL
    SELECT p.parent_identifier, up.ds, up.lvl, up.typ, up.n, false, up.steps + 1
      FROM up CROSS JOIN LATERAL (SELECT parent_identifier FROM resources
                                   WHERE identifier = up.node AND NOT is_deleted LIMIT 1) p
     WHERE p.parent_identifier IS NOT NULL AND up.steps < 127
  )
  INSERT INTO tree_counts AS t (node, datasource_id, access_level, payload_type, children, descendants)
  SELECT node, ds, lvl, typ, coalesce(sum(n) FILTER (WHERE first), 0), sum(n) FROM up GROUP BY node, ds, lvl, typ
  ON CONFLICT ON CONSTRAINT tree_counts_class DO UPDATE
    SET children = t.children + excluded.children, descendants = t.descendants + excluded.descendants;
END
$fn$;

CREATE FUNCTION tree_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  units jsonb;
BEGIN
  IF NOT tree_counts_enabled() THEN
    RETURN NULL;
  END IF;
  SELECT jsonb_agg(jsonb_build_object('node', parent_identifier, 'ds', datasource_id, 'lvl', access_level, 'typ', payload_type, 'n', n)) INTO units
    FROM (SELECT parent_identifier, datasource_id, access_level, payload_type, count(*) AS n FROM inserted
           WHERE NOT is_deleted AND parent_identifier IS NOT NULL
           GROUP BY parent_identifier, datasource_id, access_level, payload_type) g;
  IF units IS NOT NULL THEN
    PERFORM tree_counts_carry(units);
  END IF;
  RETURN NULL;
END
$fn$;

CREATE FUNCTION tree_counts_relabel() RETURNS trigger LANGUAGE plpgsql SET enable_nestloop = off AS $fn$
DECLARE
  units jsonb;
BEGIN
  IF NOT tree_counts_enabled() THEN
    RETURN NULL;
  END IF;
  SELECT jsonb_agg(jsonb_build_object('node', node, 'ds', ds, 'lvl', lvl, 'typ', typ, 'n', n)) INTO units
    FROM (SELECT n.parent_identifier AS node, o.datasource_id AS ds, o.access_level AS lvl, o.payload_type AS typ, -1 AS n
            FROM superseded o JOIN replacing n ON n.identifier = o.identifier
           WHERE NOT n.is_deleted AND NOT o.is_deleted AND n.parent_identifier IS NOT NULL
             AND o.parent_identifier IS NOT DISTINCT FROM n.parent_identifier
             AND (o.datasource_id IS DISTINCT FROM n.datasource_id OR o.access_level <> n.access_level OR o.payload_type <> n.payload_type)
          UNION ALL
          SELECT n.parent_identifier, n.datasource_id, n.access_level, n.payload_type, 1
            FROM superseded o JOIN replacing n ON n.identifier = o.identifier
           WHERE NOT n.is_deleted AND NOT o.is_deleted AND n.parent_identifier IS NOT NULL
             AND o.parent_identifier IS NOT DISTINCT FROM n.parent_identifier
             AND (o.datasource_id IS DISTINCT FROM n.datasource_id OR o.access_level <> n.access_level OR o.payload_type <> n.payload_type)) c;
  IF units IS NOT NULL THEN
    PERFORM tree_counts_carry(units);
  END IF;
  RETURN NULL;
END
$fn$;

-- Every count from the current rows, one tree level a step (a bulk load,
-- migration 21): level 1 is each active row's unit at its parent; level
-- k+1 carries level k's units one step up from the active nodes.
CREATE FUNCTION tree_counts_rebuild() RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  carried bigint;
  steps int := 0;
BEGIN
  DELETE FROM tree_counts;
  CREATE TEMPORARY TABLE tree_counts_level ON COMMIT DROP AS
    SELECT parent_identifier AS node, datasource_id AS ds, access_level AS lvl, payload_type AS typ, count(*) AS n
      FROM resources WHERE NOT is_deleted AND parent_identifier IS NOT NULL
     GROUP BY 1, 2, 3, 4;
  CREATE TEMPORARY TABLE tree_counts_sum ON COMMIT DROP AS
    SELECT node, ds, lvl, typ, n AS children, n AS descendants FROM tree_counts_level;
  LOOP
    CREATE TEMPORARY TABLE tree_counts_next ON COMMIT DROP AS
      SELECT r.parent_identifier AS node, l.ds, l.lvl, l.typ, sum(l.n)::bigint AS n
        FROM tree_counts_level l JOIN resources r ON r.identifier = l.node
       WHERE NOT r.is_deleted AND r.parent_identifier IS NOT NULL
       GROUP BY 1, 2, 3, 4;
    GET DIAGNOSTICS carried = ROW_COUNT;
    DROP TABLE tree_counts_level;
    ALTER TABLE tree_counts_next RENAME TO tree_counts_level;
    EXIT WHEN carried = 0 OR steps > 10000;
    INSERT INTO tree_counts_sum SELECT node, ds, lvl, typ, 0, n FROM tree_counts_level;
    steps := steps + 1;
  END LOOP;
  INSERT INTO tree_counts (node, datasource_id, access_level, payload_type, children, descendants)
  SELECT node, ds, lvl, typ, sum(children), sum(descendants) FROM tree_counts_sum GROUP BY 1, 2, 3, 4;
  DROP TABLE tree_counts_level, tree_counts_sum;
END
$fn$;

CREATE TRIGGER resources_tree_counts_insert AFTER INSERT ON resources
  REFERENCING NEW TABLE AS inserted
  FOR EACH STATEMENT EXECUTE FUNCTION tree_counts_insert();
CREATE TRIGGER resources_tree_counts_row BEFORE UPDATE ON resources
  FOR EACH ROW WHEN (OLD.parent_identifier IS DISTINCT FROM NEW.parent_identifier OR OLD.is_deleted <> NEW.is_deleted)
  EXECUTE FUNCTION tree_counts_row();
CREATE TRIGGER resources_tree_counts_relabel AFTER UPDATE ON resources
  REFERENCING OLD TABLE AS superseded NEW TABLE AS replacing
  FOR EACH STATEMENT EXECUTE FUNCTION tree_counts_relabel();
`;
