// Query support.
//
// secrets(name, value): server secrets that every process on the database
//   must share, generated once (the query cursor signing key).
//
// Indexes for the common queries on the current state (live rows only, as
// every current query filters tombstones out):
//   resources_type_created_idx   by payload type, sorted by created_at (the default sort)
//   resources_created_idx        no payload type, sorted by created_at
//   resources_payload_gin_idx    equality on payload fields (compiled to payload @> {...})
//   resources_derived_from_idx   derived_from contains
// Descendants walk resources_parent_idx (0001); as_of reads of one type use
// resource_versions_type_idx.
export const sql = `
CREATE TABLE secrets (
  name text PRIMARY KEY,
  value text NOT NULL
);

CREATE INDEX resources_type_created_idx ON resources (payload_type, created_at, identifier) WHERE NOT is_deleted;
CREATE INDEX resources_created_idx ON resources (created_at, identifier) WHERE NOT is_deleted;
CREATE INDEX resources_payload_gin_idx ON resources USING gin (payload jsonb_path_ops) WHERE NOT is_deleted;
CREATE INDEX resources_derived_from_idx ON resources USING gin (derived_from) WHERE NOT is_deleted;
CREATE INDEX resource_versions_type_idx ON resource_versions (payload_type, tx_from, tx_to);
`;
