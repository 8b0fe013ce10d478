// A write that changed nothing (an empty create, a delete of nothing, an
// update to the same values) wakes no watcher (docs/events.md). Every write still
// takes the clock first (store/sql.ts: that row lock orders the commits), so
// the tick alone cannot say whether anything was written; the notification
// therefore moves to commit time, as a deferred constraint trigger on the
// clock row, and fires only when a version carries this transaction's stamp.
// Every version a write produces stamps `resources.updated_at` with the
// clock's value (resources_updated_idx answers that at once), and no other
// transaction can write that stamp: the clock row stays locked to commit.
export const sql = `
DROP TRIGGER clock_resource_events ON clock;

CREATE OR REPLACE FUNCTION resource_events_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF EXISTS (SELECT 1 FROM resources WHERE updated_at = NEW.last) THEN
    PERFORM pg_notify('resource_events', '');
  END IF;
  RETURN NULL;
END
$fn$;

CREATE CONSTRAINT TRIGGER clock_resource_events AFTER UPDATE ON clock
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION resource_events_notify();
`;
