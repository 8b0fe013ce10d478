// The log of counts (migration 0023) over the whole history, so that
// statistics at any as_of read O(groups) rows of it (store/stats.ts). The
// log started at migration 0023 for an existing store, and again at every
// restore (whose versions carry stamps of their own); a point before that
// start was answered from the history, per resource. Now the log is derived
// from the history once, here and at the end of each restore, and it covers
// every point, so datasource_counts_since (where it started) goes.
//
// datasource_counts_rebuild(): the log as the writes would have kept it,
// from the versions and their attribution periods (the attribution is
// derived from the history too: migration 0018, store/attribution.ts).
// A span is a version's period cut by one of its attribution periods: the
// resource counted in the group (datasource, payload type, access level)
// from `s` to `e`, with its file bytes and its stamp `u` (the version's
// updated_at, never later than `s`). A group's values change only where a
// span starts or ends: per group and such point, the running sums of the
// spans started less those ended, and the latest stamp among the spans that
// hold the point, found by walking the group's spans from the newest stamp
// at or before it (an index walk that stops at the first span still open:
// usually the one written at the point itself). One pass over the history
// and one index probe a point; measured in BENCHMARKS.md (restore).
export const sql = `
CREATE FUNCTION datasource_counts_rebuild() RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  DROP TABLE IF EXISTS pg_temp.counts_spans;
  CREATE TEMPORARY TABLE counts_spans ON COMMIT DROP AS
  SELECT a.datasource_id AS ds, v.payload_type AS pt, v.access_level AS al,
         greatest(v.tx_from, a.tx_from) AS s, least(v.tx_to, a.tx_to) AS e,
         CASE WHEN v.payload_type = 'file' THEN coalesce((v.payload->>'size_bytes')::numeric, 0) ELSE 0 END AS b,
         v.updated_at AS u
    FROM resource_history v
    JOIN resource_attribution a ON a.identifier = v.identifier AND a.tx_from < v.tx_to AND a.tx_to > v.tx_from
   WHERE NOT v.is_deleted AND v.payload_type <> 'datasource';
  CREATE INDEX counts_spans_newest ON counts_spans (ds, pt, al, u DESC);
  ANALYZE counts_spans;
  DELETE FROM datasource_counts_log;
  INSERT INTO datasource_counts_log (datasource_id, payload_type, access_level, tx_from, resources, total_bytes, last_updated_at)
  SELECT x.ds, x.pt, x.al, x.p, x.n, x.b,
         CASE WHEN x.n > 0 THEN (
           SELECT sp.u FROM counts_spans sp
            WHERE sp.ds = x.ds AND sp.pt = x.pt AND sp.al = x.al AND sp.u <= x.p AND sp.s <= x.p AND sp.e > x.p
            ORDER BY sp.u DESC LIMIT 1)
         END
    FROM (SELECT ds, pt, al, p, (sum(sum(dn)) OVER w)::bigint AS n, sum(sum(db)) OVER w AS b
            FROM (SELECT ds, pt, al, s AS p, 1 AS dn, b AS db FROM counts_spans
                  UNION ALL
                  SELECT ds, pt, al, e, -1, -b FROM counts_spans WHERE e < 'infinity') ev
           GROUP BY ds, pt, al, p
          WINDOW w AS (PARTITION BY ds, pt, al ORDER BY p)) x;
  DROP TABLE counts_spans;
  -- Statistics at an as_of read the groups of datasource_counts: every group the log holds has its row (0 now when
  -- only the past held it, as a group that falls to 0 keeps its row).
  INSERT INTO datasource_counts (datasource_id, payload_type, access_level, resources, total_bytes, last_updated_at)
  SELECT DISTINCT datasource_id, payload_type, access_level, 0, 0, NULL::timestamptz FROM datasource_counts_log
  ON CONFLICT (datasource_id, payload_type, access_level) DO NOTHING;
END
$fn$;

SELECT datasource_counts_rebuild();
DROP FUNCTION datasource_counts_restart();
DROP TABLE datasource_counts_since;
`;
