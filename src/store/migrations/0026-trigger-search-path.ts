// The store's trigger functions name their tables unqualified, so they ran
// in whatever search_path the writing session had. pg_restore (and pg_dump's
// scripts) set it to '' before loading rows: a data-only restore into a
// migrated store failed in the first trigger (relation "tree_counts" does not
// exist). Each trigger function now carries the search_path of the schema
// the store was migrated in (docs/operations.md, backups), pg_temp last so
// that no temporary table can stand in for a store table; the functions they
// call run inside that setting. Set-based triggers pay it once a statement;
// tree_counts_row (a row trigger on UPDATE) once a row, a few microseconds.
export const sql = `
DO $do$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN
    SELECT p.oid::regprocedure FROM pg_proc p
    WHERE p.pronamespace = current_schema()::regnamespace AND p.prorettype = 'trigger'::regtype
  LOOP
    EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
  END LOOP;
END
$do$;
`;
