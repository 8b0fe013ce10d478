// Pages after the first read the history at the cursor's pinned point, and
// as_of queries read it too. Without an index in the default sort order
// (created_at, identifier) each such page scanned every version and sorted:
// linear in the history, 43x the first page at 1M resources
// (docs/benchmarks/first-runs.md, "What limits each miss").
// With these the page walks the index in keyset order and filters the
// period; closed versions of one identifier share its created_at and sit
// next to each other, so they are skipped cheaply.
export const sql = `
CREATE INDEX resource_versions_type_created_idx
  ON resource_versions (payload_type, created_at, identifier) WHERE NOT is_deleted;
CREATE INDEX resource_versions_created_idx
  ON resource_versions (created_at, identifier) WHERE NOT is_deleted;
`;
