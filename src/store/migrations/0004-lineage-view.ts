// The lineage materialized view (PostgreSQL only; PGlite has one connection
// and no background refresher, so it always walks the tree with recursive
// CTEs and this migration creates nothing there).
//
// lineage_closure(ancestor, descendant, depth): the closure of the current
//   parent edges over active resources, depth 0 included (every active
//   resource is its own ancestor at depth 0). A path stops at a tombstone, as
//   the tree listing does: a resource under a tombstoned parent is not a
//   descendant of the resources above that parent. The unique index on
//   (ancestor, descendant) lets it refresh CONCURRENTLY.
//
// lineage_view_state.refreshed_at: the committed clock read just before the
//   last refresh. Every version stamped at or before it was committed then, so
//   the view is exact while no version stamped later changed a parent or a
//   tombstone; readers check that in their own snapshot (store/lineage-view.ts).
//
// The triggers send NOTIFY lineage_changed when a committed write changes the
// tree (a create, a parent change, a delete or a restore), so a listening
// refresher in any service process can refresh the view soon after.
export const sql = `
DO $migration$
BEGIN
  IF version() LIKE '%PGlite%' THEN
    RETURN;
  END IF;

  CREATE INDEX resource_versions_tx_from_idx ON resource_versions (tx_from);

  CREATE TABLE lineage_view_state (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    refreshed_at timestamptz NOT NULL
  );
  INSERT INTO lineage_view_state (id, refreshed_at) SELECT true, last FROM clock;

  CREATE MATERIALIZED VIEW lineage_closure AS
    WITH RECURSIVE closure(ancestor, descendant, depth) AS (
      SELECT identifier, identifier, 0 FROM resources WHERE NOT is_deleted
      UNION ALL
      SELECT c.ancestor, r.identifier, c.depth + 1
        FROM closure c JOIN resources r ON r.parent_identifier = c.descendant
       WHERE NOT r.is_deleted
    )
    SELECT ancestor COLLATE "C" AS ancestor, descendant COLLATE "C" AS descendant, depth FROM closure;
  CREATE UNIQUE INDEX lineage_closure_pair_idx ON lineage_closure (ancestor, descendant);
  CREATE INDEX lineage_closure_descendant_idx ON lineage_closure (descendant, depth);

  CREATE FUNCTION lineage_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
  BEGIN
    PERFORM pg_notify('lineage_changed', '');
    RETURN NULL;
  END
  $fn$;
  CREATE TRIGGER resources_lineage_insert AFTER INSERT ON resources
    FOR EACH STATEMENT EXECUTE FUNCTION lineage_notify();
  CREATE TRIGGER resources_lineage_update AFTER UPDATE ON resources
    FOR EACH ROW WHEN (OLD.parent_identifier IS DISTINCT FROM NEW.parent_identifier OR OLD.is_deleted <> NEW.is_deleted)
    EXECUTE FUNCTION lineage_notify();
  CREATE TRIGGER resources_lineage_delete AFTER DELETE ON resources
    FOR EACH STATEMENT EXECUTE FUNCTION lineage_notify();
END
$migration$;
`;
