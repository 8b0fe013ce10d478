// Resources and their history.
//
// clock(id, last)
//   One row. Every write transaction first runs
//   UPDATE clock SET last = greatest(clock_timestamp(), last + 1 µs) RETURNING last
//   and stamps everything it writes with that value, so stamps strictly
//   increase in commit order; the row lock also serialises writers. Reads
//   take least(as_of, last) as their read point.
//
// resources: the current state, one row per identifier (tombstoned too).
//   identifier        text collate "C", primary key
//   payload_type      text
//   parent_identifier text collate "C", null for roots
//   license           text, null when unset
//   access_level      text ("public" | "internal" | "restricted")
//   derived_from      text[]
//   payload           jsonb, the proto3 JSON of the payload message (proto field names)
//   created_at        timestamptz, first creation (a create over a tombstone resets it)
//   updated_at        timestamptz, the stamp of the last version
//   version           bigint, 1 on create, +1 on every change
//   is_deleted        boolean, tombstone
//   deleted_by        timestamptz, the stamp of the delete that tombstoned the row
//                     (one delete operation per transaction, so the stamp names it);
//                     a cascading restore undoes exactly the rows of that delete
//
// resource_versions: append-only history, one row per version, the same
//   columns plus the period [tx_from, tx_to); tx_to = 'infinity' for the open
//   (current) version. Exactly one open version per identifier.
export const sql = `
CREATE TABLE clock (
  id boolean PRIMARY KEY DEFAULT true CHECK (id),
  last timestamptz NOT NULL
);
INSERT INTO clock (id, last) VALUES (true, '-infinity');

CREATE TABLE resources (
  identifier text COLLATE "C" PRIMARY KEY,
  payload_type text NOT NULL,
  parent_identifier text COLLATE "C",
  license text,
  access_level text NOT NULL,
  derived_from text[] NOT NULL DEFAULT '{}',
  payload jsonb NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  version bigint NOT NULL,
  is_deleted boolean NOT NULL DEFAULT false,
  deleted_by timestamptz
);
CREATE INDEX resources_parent_idx ON resources (parent_identifier, created_at, identifier);

CREATE TABLE resource_versions (
  identifier text COLLATE "C" NOT NULL,
  version bigint NOT NULL,
  tx_from timestamptz NOT NULL,
  tx_to timestamptz NOT NULL DEFAULT 'infinity',
  payload_type text NOT NULL,
  parent_identifier text COLLATE "C",
  license text,
  access_level text NOT NULL,
  derived_from text[] NOT NULL DEFAULT '{}',
  payload jsonb NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  is_deleted boolean NOT NULL DEFAULT false,
  deleted_by timestamptz,
  PRIMARY KEY (identifier, version),
  CHECK (tx_from < tx_to)
);
CREATE UNIQUE INDEX resource_versions_open_idx ON resource_versions (identifier) WHERE tx_to = 'infinity';
CREATE INDEX resource_versions_period_idx ON resource_versions (identifier, tx_from, tx_to);
CREATE INDEX resource_versions_parent_idx ON resource_versions (parent_identifier, tx_from);
`;
