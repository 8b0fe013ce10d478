// The tree counts of 0020, kept set-based for every UPDATE (issue 40): the
// row trigger of 0020 walked the ancestor chain once per changed row, so a
// cascading delete or restore of a whole patient (2,026 rows in one
// statement) paid 2,026 walks and upserts, 5-10x the statement itself
// (docs/benchmarks/tree-and-scale.md, "Tree counts"). One statement trigger over the transition
// tables replaces it and the relabel trigger, in three set-based steps:
//
// 1. Off: every row whose parent or tombstone changed and that was active
//    takes its old contribution (its unit in its old class, plus the
//    counts stored below it before the statement) off its old parent, and
//    up through the old tree while the node is active and not one of the
//    changed rows. Read top-down, this is each row deleted in turn: a row's
//    ancestors among the changed ones are already tombstones (the walk
//    stops at them), its descendants not yet taken (its stored counts are
//    still the old ones). So a cascade's inner rows each reach one step,
//    and the rows are grouped by parent and class first: one walk per
//    parent, not per row.
// 2. On: every row whose parent or tombstone changed and that is active now
//    adds its unit in its new class plus the counts stored below it after
//    step 1, at its new parent and up through the nodes active now (the
//    first tombstone met is the last), grouped by parent and class. Read
//    top-down in the new tree, each row restored in turn: its ancestors
//    among the changed ones are restored already, its descendants not yet.
//    (Between 1 and 2 every changed row is a tombstone; a tombstone's parent
//    counts nothing, so the new parents cost nothing.)
// 3. Relabel (as 0020): a row whose class alone changed moves its unit from
//    the old class to the new along the chain it reaches now.
// Each step is exact whatever the statement mixes (moves, deletes,
// restores, class changes): the end state is the one a row-by-row walk
// reaches, and every count stays a function of the rows. Walks stop 128
// levels up, as a create's (docs/lineage.md). The lookups of tree_counts
// and of each walk's next parent are LATERAL key lookups, never a scan.
// Every statement over the transition tables is a dynamic EXECUTE, planned
// at each call with the tables' real sizes: PL/pgSQL keeps the plan of a
// static statement from its first call, and a plan made for a 1-row
// statement (a nested loop joining the two tables) cost seconds for 3,000
// rows and a minute for 10,000, quadratic; planned per call they join by
// hash (test/store/trigger-plans.test.ts reads the plans). No JIT: the plans are small, and compiling them cost more than a
// second a statement where the whole trigger needs milliseconds.
export const sql = `
DROP TRIGGER IF EXISTS resources_tree_counts_row ON resources;
DROP TRIGGER IF EXISTS resources_tree_counts_relabel ON resources;
DROP FUNCTION IF EXISTS tree_counts_row();
DROP FUNCTION IF EXISTS tree_counts_relabel();
DROP FUNCTION IF EXISTS tree_counts_shift(text, text, text, text, text, bigint);

CREATE FUNCTION tree_counts_update() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $fn$
DECLARE
  placed bigint;
  relabelled bigint;
  units jsonb;
BEGIN
  IF NOT tree_counts_enabled() THEN
    RETURN NULL;
  END IF;
  EXECUTE $q$
  SELECT count(*) FILTER (WHERE o.parent_identifier IS DISTINCT FROM n.parent_identifier OR o.is_deleted <> n.is_deleted),
         count(*) FILTER (WHERE NOT n.is_deleted AND NOT o.is_deleted AND n.parent_identifier IS NOT NULL
                            AND o.parent_identifier IS NOT DISTINCT FROM n.parent_identifier
                            AND (o.datasource_id IS DISTINCT FROM n.datasource_id OR o.access_level <> n.access_level OR o.payload_type <> n.payload_type))
    FROM superseded o JOIN replacing n ON n.identifier = o.identifier
  $q$ INTO placed, relabelled;

  IF placed > 0 THEN
    -- 1. Off, from the old tree.
    EXECUTE $q$
    WITH RECURSIVE changed AS (
      SELECT o.identifier, o.parent_identifier, o.is_deleted, o.datasource_id, o.access_level, o.payload_type
        FROM superseded o JOIN replacing n ON n.identifier = o.identifier
       WHERE o.parent_identifier IS DISTINCT FROM n.parent_identifier OR o.is_deleted <> n.is_deleted
    ),
    units AS (
      SELECT parent_identifier AS node, datasource_id AS ds, access_level AS lvl, payload_type AS typ, -1::bigint AS c, -1::bigint AS d
        FROM changed WHERE NOT is_deleted AND parent_identifier IS NOT NULL
      UNION ALL
      SELECT m.parent_identifier, t.datasource_id, t.access_level, t.payload_type, 0, -t.descendants
        FROM changed m CROSS JOIN LATERAL (SELECT datasource_id, access_level, payload_type, descendants FROM tree_counts
                                            WHERE node = m.identifier OFFSET 0) t
       WHERE NOT m.is_deleted AND m.parent_identifier IS NOT NULL
    ),
    up(node, ds, lvl, typ, c, d, steps) AS (
      SELECT node COLLATE "C", ds, lvl, typ, sum(c)::bigint, sum(d)::bigint, 0 FROM units GROUP BY node, ds, lvl, typ
      UNION ALL
      SELECT p.parent_identifier, up.ds, up.lvl, up.typ, 0::bigint, up.d, up.steps + 1
        FROM up CROSS JOIN LATERAL (SELECT parent_identifier FROM resources
                                     WHERE identifier = up.node AND NOT is_deleted LIMIT 1) p
       WHERE p.parent_identifier IS NOT NULL AND up.steps < 127
         AND NOT EXISTS (SELECT 1 FROM changed x WHERE x.identifier = up.node)
    )
    INSERT INTO tree_counts AS t (node, datasource_id, access_level, payload_type, children, descendants)
    SELECT node, ds, lvl, typ, sum(c), sum(d) FROM up GROUP BY node, ds, lvl, typ HAVING sum(c) <> 0 OR sum(d) <> 0
    ON CONFLICT ON CONSTRAINT tree_counts_class DO UPDATE
      SET children = t.children + excluded.children, descendants = t.descendants + excluded.descendants
    $q$;

    -- 2. On, in the tree as it is now (the counts below each row as step 1 left them).
    EXECUTE $q$
    WITH RECURSIVE placed AS (
      SELECT n.identifier, n.parent_identifier, n.datasource_id, n.access_level, n.payload_type
        FROM superseded o JOIN replacing n ON n.identifier = o.identifier
       WHERE (o.parent_identifier IS DISTINCT FROM n.parent_identifier OR o.is_deleted <> n.is_deleted)
         AND NOT n.is_deleted AND n.parent_identifier IS NOT NULL
    ),
    units AS (
      SELECT parent_identifier AS node, datasource_id AS ds, access_level AS lvl, payload_type AS typ, 1::bigint AS c, 1::bigint AS d
        FROM placed
      UNION ALL
      SELECT m.parent_identifier, t.datasource_id, t.access_level, t.payload_type, 0, t.descendants
        FROM placed m CROSS JOIN LATERAL (SELECT datasource_id, access_level, payload_type, descendants FROM tree_counts
                                           WHERE node = m.identifier OFFSET 0) t
    ),
    up(node, ds, lvl, typ, c, d, steps) AS (
      SELECT node COLLATE "C", ds, lvl, typ, sum(c)::bigint, sum(d)::bigint, 0 FROM units GROUP BY node, ds, lvl, typ
      UNION ALL
      SELECT p.parent_identifier, up.ds, up.lvl, up.typ, 0::bigint, up.d, up.steps + 1
        FROM up CROSS JOIN LATERAL (SELECT parent_identifier FROM resources
                                     WHERE identifier = up.node AND NOT is_deleted LIMIT 1) p
       WHERE p.parent_identifier IS NOT NULL AND up.steps < 127
    )
    INSERT INTO tree_counts AS t (node, datasource_id, access_level, payload_type, children, descendants)
    SELECT node, ds, lvl, typ, sum(c), sum(d) FROM up GROUP BY node, ds, lvl, typ HAVING sum(c) <> 0 OR sum(d) <> 0
    ON CONFLICT ON CONSTRAINT tree_counts_class DO UPDATE
      SET children = t.children + excluded.children, descendants = t.descendants + excluded.descendants
    $q$;
  END IF;

  IF relabelled > 0 THEN
    -- 3. A class alone changed.
    EXECUTE $q$
    SELECT jsonb_agg(jsonb_build_object('node', node, 'ds', ds, 'lvl', lvl, 'typ', typ, 'n', n))
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
               AND (o.datasource_id IS DISTINCT FROM n.datasource_id OR o.access_level <> n.access_level OR o.payload_type <> n.payload_type)) c
    $q$ INTO units;
    PERFORM tree_counts_carry(units);
  END IF;
  RETURN NULL;
END
$fn$;

CREATE TRIGGER resources_tree_counts_update AFTER UPDATE ON resources
  REFERENCING OLD TABLE AS superseded NEW TABLE AS replacing
  FOR EACH STATEMENT EXECUTE FUNCTION tree_counts_update();
`;
