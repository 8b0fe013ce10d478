// Access (docs/contract/18-access.md): the datasource each resource is attributed to,
// cheap to join for the visibility predicate (store/visibility.ts).
//
// resources.datasource_id: the resource's datasource now (section 8): a
//   patient's payload datasource_id, a `datasource` resource's own
//   identifier, else the nearest patient ancestor's; NULL for none. The
//   chain follows parent_identifier whether or not the ancestors are
//   tombstoned: a tombstone does not make a resource public. Kept current by
//   the writes (store/attribution.ts): a re-parent moves a whole subtree, so
//   the write pays, never a read.
//
// resource_attribution(identifier, datasource_id, tx_from, tx_to): the same
//   value over time, for reads at an as_of point. A resource is attributed
//   to datasource_id during [tx_from, tx_to); tx_to = 'infinity' for the
//   current period. Only periods with a datasource are kept: no row at t
//   means none at t. Periods of one identifier never overlap.
//
// Backfill: the current column by a walk of the current tree; the periods
// from the whole history, each version's period cut by its parent's
// propagated periods (a recursive walk over the history, so past re-parents
// and past datasource changes are attributed as they were).
export const sql = `
ALTER TABLE resources ADD COLUMN datasource_id text COLLATE "C";

CREATE TABLE resource_attribution (
  identifier text COLLATE "C" NOT NULL,
  datasource_id text COLLATE "C" NOT NULL,
  tx_from timestamptz NOT NULL,
  tx_to timestamptz NOT NULL,
  PRIMARY KEY (identifier, tx_from),
  CHECK (tx_from < tx_to)
);
CREATE INDEX resource_attribution_open_idx ON resource_attribution (identifier) WHERE tx_to = 'infinity';

-- prop: the datasource a resource hands down (its own if a patient, else its parent's), over periods.
CREATE TEMPORARY TABLE attribution_backfill ON COMMIT DROP AS
WITH RECURSIVE prop(identifier, payload_type, f, t, ds) AS (
  SELECT v.identifier, v.payload_type, v.tx_from, v.tx_to,
         CASE WHEN v.payload_type = 'patient' THEN v.payload->>'datasource_id' END
    FROM resource_history v
   WHERE v.payload_type = 'patient' OR v.parent_identifier IS NULL
  UNION ALL
  SELECT v.identifier, v.payload_type, greatest(v.tx_from, p.f), least(v.tx_to, p.t), p.ds
    FROM prop p JOIN resource_history v ON v.parent_identifier = p.identifier
     AND v.tx_from < p.t AND v.tx_to > p.f
   WHERE v.payload_type <> 'patient'
)
SELECT identifier, CASE WHEN payload_type = 'datasource' THEN identifier ELSE ds END AS ds, f, t FROM prop;

INSERT INTO resource_attribution (identifier, datasource_id, tx_from, tx_to)
SELECT identifier, ds, f, t FROM attribution_backfill WHERE ds IS NOT NULL AND f < t;

UPDATE resources r SET datasource_id = b.ds
  FROM attribution_backfill b
 WHERE b.identifier = r.identifier AND b.t = 'infinity' AND b.ds IS NOT NULL;
`;
