// The change feed (store/events.ts) reads the history in commit order and is
// woken by a notification after every committed write.
//
// - resource_versions (tx_from): the feed's pages walk the history by stamp.
//   PostgreSQL already has it (0004); PGlite gets it here.
// - Every write transaction takes the clock row first (store/sql.ts), so one
//   statement-level trigger on the clock notifies `resource_events` once per
//   write transaction, delivered at commit to listeners in every process.
//   The payload is the stamp; readers do not trust it, they read the clock.
export const sql = `
CREATE INDEX IF NOT EXISTS resource_versions_tx_from_idx ON resource_versions (tx_from);

CREATE FUNCTION resource_events_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_notify('resource_events', '');
  RETURN NULL;
END
$fn$;
CREATE TRIGGER clock_resource_events AFTER UPDATE ON clock
  FOR EACH STATEMENT EXECUTE FUNCTION resource_events_notify();
`;
