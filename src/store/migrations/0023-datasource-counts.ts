// Statistics from counts the writes keep (docs/lineage.md): Stats and DetailedStats
// now read O(datasources x payload types x access levels) rows, never the
// resources.
//
// datasource_counts(datasource_id, payload_type, access_level, resources,
//   total_bytes, last_updated_at): per group, the active resources
//   (NOT is_deleted) attributed to the datasource (resources.datasource_id,
//   kept by store/attribution.ts), `datasource` resources left out as the
//   statistics leave them out (docs/contract/08-statistics.md); total_bytes
//   sums file.size_bytes; last_updated_at is the latest updated_at among
//   the group's active resources (NULL when it has none). A group that falls
//   to 0 keeps its row (0 resources). The access level is part of the key
//   because the counts are per caller (docs/access.md): a caller sees the
//   groups of its granted datasources within its clearance.
//
// Kept by triggers on `resources`, in the writing statement's transaction
// (store/stats.ts reads them):
// - UPDATE (every change: update, delete, restore, move, the attribution
//   of store/attribution.ts): a statement trigger over the transition
//   tables, which the supersede trigger of 0006 already captures: minus the
//   replaced rows, plus the replacing ones, one upsert per group touched;
// - INSERT: a statement trigger over the inserted rows that counts those
//   inserted active with a datasource already set (a restore, a bulk load);
//   a create inserts with none, and the attribution UPDATE then counts it,
//   so a create pays a pass over its own rows here. (A row trigger, one
//   upsert per row, made a 100,000-row INSERT ... SELECT take minutes: each
//   row updated the same group's row again in one transaction.)
// - DELETE (an incremental restore of a dump takes rows out): a statement
//   trigger over the deleted rows.
// The latest stamp can only be recomputed when a group loses the row that
// held it (a delete, a move, a level change): then the group's newest
// active row is found by walking resources_updated_idx back from the end,
// paid by that write.
//
// datasource_counts_log: the same values over time, for statistics at an
//   as_of: one row per group and write transaction that changed it, stamped
//   with the transaction's clock value (tx_from), holding the group's values
//   from then on. A read at t takes, per group, the row with the greatest
//   tx_from <= t (the primary key's order): O(groups x log(changes)). It
//   answers for t >= datasource_counts_since.since only: before it (a store
//   older than this migration, or a restored dump, whose versions carry
//   stamps of their own) the history answers. It holds the values the
//   counts hold: what every caller who sees everything sees; a caller with
//   narrower grants at an as_of needs the stricter-of rule (docs/access.md),
//   which needs each resource as it reads now, and reads the history.
//
// Backfill: one pass over the current rows; the log starts at the clock.
export const sql = `
CREATE TABLE datasource_counts (
  datasource_id text COLLATE "C" NOT NULL,
  payload_type text COLLATE "C" NOT NULL,
  access_level text COLLATE "C" NOT NULL,
  resources bigint NOT NULL,
  total_bytes numeric NOT NULL,
  last_updated_at timestamptz,
  PRIMARY KEY (datasource_id, payload_type, access_level)
);

INSERT INTO datasource_counts (datasource_id, payload_type, access_level, resources, total_bytes, last_updated_at)
SELECT datasource_id, payload_type, access_level, count(*),
       coalesce(sum((payload->>'size_bytes')::numeric) FILTER (WHERE payload_type = 'file'), 0), max(updated_at)
  FROM resources
 WHERE NOT is_deleted AND payload_type <> 'datasource' AND datasource_id IS NOT NULL
 GROUP BY datasource_id, payload_type, access_level;

CREATE TABLE datasource_counts_log (
  datasource_id text COLLATE "C" NOT NULL,
  payload_type text COLLATE "C" NOT NULL,
  access_level text COLLATE "C" NOT NULL,
  tx_from timestamptz NOT NULL,
  resources bigint NOT NULL,
  total_bytes numeric NOT NULL,
  last_updated_at timestamptz,
  PRIMARY KEY (datasource_id, payload_type, access_level, tx_from)
);
CREATE TABLE datasource_counts_since (
  id boolean PRIMARY KEY DEFAULT true CHECK (id),
  since timestamptz NOT NULL
);
INSERT INTO datasource_counts_since (since) SELECT last FROM clock;
INSERT INTO datasource_counts_log (datasource_id, payload_type, access_level, tx_from, resources, total_bytes, last_updated_at)
SELECT c.datasource_id, c.payload_type, c.access_level, k.last, c.resources, c.total_bytes, c.last_updated_at
  FROM datasource_counts c CROSS JOIN clock k;

-- The log restarts at the clock (after a restore wrote versions with stamps of their own).
CREATE FUNCTION datasource_counts_restart() RETURNS void LANGUAGE sql AS $fn$
  UPDATE datasource_counts_since SET since = (SELECT last FROM clock);
  INSERT INTO datasource_counts_log AS l (datasource_id, payload_type, access_level, tx_from, resources, total_bytes, last_updated_at)
  SELECT c.datasource_id, c.payload_type, c.access_level, k.last, c.resources, c.total_bytes, c.last_updated_at
    FROM datasource_counts c CROSS JOIN clock k
  ON CONFLICT (datasource_id, payload_type, access_level, tx_from) DO UPDATE
    SET resources = excluded.resources, total_bytes = excluded.total_bytes, last_updated_at = excluded.last_updated_at;
$fn$;

-- One group's change: n resources and bytes more (negative: fewer), the
-- latest stamp among the rows that came in, and the latest among those that left.
CREATE FUNCTION datasource_counts_add(ds text, pt text, al text, n bigint, bytes numeric, came timestamptz, left_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  cur timestamptz;
BEGIN
  INSERT INTO datasource_counts AS c (datasource_id, payload_type, access_level, resources, total_bytes, last_updated_at)
  VALUES (ds, pt, al, n, bytes, came)
  ON CONFLICT (datasource_id, payload_type, access_level) DO UPDATE
    SET resources = c.resources + excluded.resources,
        total_bytes = c.total_bytes + excluded.total_bytes,
        last_updated_at = greatest(c.last_updated_at, excluded.last_updated_at)
  RETURNING last_updated_at INTO cur;
  IF left_at IS NOT NULL AND (cur IS NULL OR left_at >= cur) THEN
    UPDATE datasource_counts c
       SET last_updated_at = (SELECT r.updated_at FROM resources r
                               WHERE r.datasource_id = ds AND r.payload_type = pt AND r.access_level = al AND NOT r.is_deleted
                               ORDER BY r.updated_at DESC LIMIT 1)
     WHERE c.datasource_id = ds AND c.payload_type = pt AND c.access_level = al;
  END IF;
  -- The group's values from this transaction's stamp on (the writer holds the clock row).
  INSERT INTO datasource_counts_log AS l (datasource_id, payload_type, access_level, tx_from, resources, total_bytes, last_updated_at)
  SELECT c.datasource_id, c.payload_type, c.access_level, k.last, c.resources, c.total_bytes, c.last_updated_at
    FROM datasource_counts c CROSS JOIN clock k
   WHERE c.datasource_id = ds AND c.payload_type = pt AND c.access_level = al
  ON CONFLICT (datasource_id, payload_type, access_level, tx_from) DO UPDATE
    SET resources = excluded.resources, total_bytes = excluded.total_bytes, last_updated_at = excluded.last_updated_at;
END
$fn$;

CREATE FUNCTION datasource_counts_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  g record;
BEGIN
  IF TG_OP = 'UPDATE' THEN
    FOR g IN
      WITH d AS (
        SELECT datasource_id AS ds, payload_type AS pt, access_level AS al, 1 AS n,
               CASE WHEN payload_type = 'file' THEN coalesce((payload->>'size_bytes')::numeric, 0) ELSE 0 END AS b,
               updated_at AS came, NULL::timestamptz AS left_at
          FROM counts_new WHERE NOT is_deleted AND payload_type <> 'datasource' AND datasource_id IS NOT NULL
        UNION ALL
        SELECT datasource_id, payload_type, access_level, -1,
               CASE WHEN payload_type = 'file' THEN -coalesce((payload->>'size_bytes')::numeric, 0) ELSE 0 END,
               NULL, updated_at
          FROM counts_old WHERE NOT is_deleted AND payload_type <> 'datasource' AND datasource_id IS NOT NULL
      )
      SELECT ds, pt, al, sum(n)::bigint AS n, sum(b) AS b, max(came) AS came, max(left_at) AS left_at
        FROM d GROUP BY ds, pt, al
    LOOP
      -- An unchanged group (a payload edit): the same count, a later stamp.
      PERFORM datasource_counts_add(g.ds, g.pt, g.al, g.n, g.b, g.came, CASE WHEN g.came >= g.left_at THEN NULL ELSE g.left_at END);
    END LOOP;
  ELSIF TG_OP = 'INSERT' THEN
    FOR g IN
      SELECT datasource_id AS ds, payload_type AS pt, access_level AS al, count(*) AS n,
             coalesce(sum((payload->>'size_bytes')::numeric) FILTER (WHERE payload_type = 'file'), 0) AS b, max(updated_at) AS came
        FROM counts_added WHERE NOT is_deleted AND payload_type <> 'datasource' AND datasource_id IS NOT NULL
       GROUP BY datasource_id, payload_type, access_level
    LOOP
      PERFORM datasource_counts_add(g.ds, g.pt, g.al, g.n, g.b, g.came, NULL);
    END LOOP;
  ELSE
    FOR g IN
      SELECT datasource_id AS ds, payload_type AS pt, access_level AS al, -count(*) AS n,
             -coalesce(sum((payload->>'size_bytes')::numeric) FILTER (WHERE payload_type = 'file'), 0) AS b, max(updated_at) AS left_at
        FROM counts_gone WHERE NOT is_deleted AND payload_type <> 'datasource' AND datasource_id IS NOT NULL
       GROUP BY datasource_id, payload_type, access_level
    LOOP
      PERFORM datasource_counts_add(g.ds, g.pt, g.al, g.n, g.b, NULL, g.left_at);
    END LOOP;
  END IF;
  RETURN NULL;
END
$fn$;

CREATE TRIGGER resources_counts_update AFTER UPDATE ON resources
  REFERENCING OLD TABLE AS counts_old NEW TABLE AS counts_new
  FOR EACH STATEMENT EXECUTE FUNCTION datasource_counts_changed();
CREATE TRIGGER resources_counts_insert AFTER INSERT ON resources
  REFERENCING NEW TABLE AS counts_added
  FOR EACH STATEMENT EXECUTE FUNCTION datasource_counts_changed();
CREATE TRIGGER resources_counts_delete AFTER DELETE ON resources
  REFERENCING OLD TABLE AS counts_gone
  FOR EACH STATEMENT EXECUTE FUNCTION datasource_counts_changed();
`;
