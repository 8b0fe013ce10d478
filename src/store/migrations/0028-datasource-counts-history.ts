// The log of counts (migration 0023) over the whole history, so that
// statistics at any as_of read O(groups) rows of it (store/stats.ts). The
// log started at migration 0023 for an existing store: a point before it
// was answered from the history, per resource. Here it is derived from the
// history once, and it covers every point (datasource_counts_since:
// '-infinity'). A restore does not derive it (that made a restore of
// 100,000 versions, each its own transaction, 70% slower: 0.42 of
// pg_restore instead of 0.67): the dump carries it since format version 3
// (store/dump-restore.ts), and a dump without one starts it again
// (datasource_counts_restart).
//
// datasource_counts_rebuild(): the log as the writes would have kept it,
// from the versions and their attribution periods (the attribution is
// derived from the history too: migration 0018, store/attribution.ts).
// A span is a version's period cut by one of its attribution periods: the
// resource counted in the group (datasource, payload type, access level)
// from `s` to `e`, with its file bytes and its stamp `u` (the version's
// updated_at, never later than `s`). A group's values change only where a
// span starts or ends: per group and such point, the running sums of the
// spans started less those ended (one pass over the history, grouped by
// start and by end at once, then a window over the points), and the
// latest stamp among the spans that hold the point. That is the point
// itself when a version of the group was written there (a
// span starting at its own stamp: every create and update); else (the
// point only took resources out, or moved some in) it is found as the
// statistics find it (store/stats.ts, lastSeen): the group's versions
// walked back from the point through the two time indexes, to the first
// one that holds it. 200k resources of the scale bench's shape: 1.4-1.6 s
// (one grouped pass over the same versions: 0.24); 100,000 versions of
// the dump bench's shape (one a transaction, so a log row each): 2.1-2.5 s.
export const sql = `
CREATE FUNCTION datasource_counts_rebuild() RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  -- Writers take the clock row first (store/sql.ts, tickClock) and log their groups before they let it go: holding
  -- it, the rebuild sees every write that committed and none can log beside it (a service of the old code still
  -- writing while another migrates).
  PERFORM 1 FROM clock FOR UPDATE;
  DELETE FROM datasource_counts_log;
  INSERT INTO datasource_counts_log (datasource_id, payload_type, access_level, tx_from, resources, total_bytes, last_updated_at)
  SELECT x.ds, x.pt, x.al, x.p, x.n, x.b,
         CASE WHEN x.n = 0 THEN NULL WHEN x.fresh THEN x.p ELSE (
           SELECT v.tx_from FROM resource_history v
             JOIN resource_attribution a ON a.identifier = v.identifier AND a.tx_from <= x.p AND a.tx_to > x.p
            WHERE v.tx_from <= x.p AND v.tx_to > x.p AND NOT v.is_deleted
              AND v.payload_type = x.pt AND v.access_level = x.al AND a.datasource_id = x.ds
            ORDER BY v.tx_from DESC LIMIT 1)
         END
    FROM (SELECT ds, pt, al, p, (sum(sum(dn)) OVER w)::bigint AS n, sum(sum(db)) OVER w AS b, bool_or(fresh) AS fresh
            FROM (SELECT ds, pt, al, CASE WHEN by_end = 1 THEN e ELSE s END AS p,
                         CASE WHEN by_end = 1 THEN -n ELSE n END AS dn, CASE WHEN by_end = 1 THEN -b ELSE b END AS db,
                         by_end = 0 AND fresh AS fresh
                    FROM (SELECT ds, pt, al, s, e, GROUPING(s) AS by_end, count(*) AS n, sum(b) AS b, bool_or(u = s) AS fresh
                            FROM (SELECT a.datasource_id AS ds, v.payload_type AS pt, v.access_level AS al,
                                         greatest(v.tx_from, a.tx_from) AS s, least(v.tx_to, a.tx_to) AS e, v.updated_at AS u,
                                         CASE WHEN v.payload_type = 'file' THEN coalesce((v.payload->>'size_bytes')::numeric, 0) ELSE 0 END AS b
                                    FROM resource_history v
                                    JOIN resource_attribution a ON a.identifier = v.identifier AND a.tx_from < v.tx_to AND a.tx_to > v.tx_from
                                   WHERE NOT v.is_deleted AND v.payload_type <> 'datasource') spans
                           GROUP BY GROUPING SETS ((ds, pt, al, s), (ds, pt, al, e))) ends
                   WHERE CASE WHEN by_end = 1 THEN e ELSE s END < 'infinity') ev
           GROUP BY ds, pt, al, p
          WINDOW w AS (PARTITION BY ds, pt, al ORDER BY p)) x;
  UPDATE datasource_counts_since SET since = '-infinity';
  -- Statistics at an as_of read the groups of datasource_counts: every group the log holds has its row (0 now when
  -- only the past held it, as a group that falls to 0 keeps its row).
  INSERT INTO datasource_counts (datasource_id, payload_type, access_level, resources, total_bytes, last_updated_at)
  SELECT DISTINCT datasource_id, payload_type, access_level, 0, 0, NULL::timestamptz FROM datasource_counts_log
  ON CONFLICT (datasource_id, payload_type, access_level) DO NOTHING;
END
$fn$;

SELECT datasource_counts_rebuild();
`;
