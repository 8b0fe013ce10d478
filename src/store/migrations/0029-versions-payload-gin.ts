// Equality on a payload field without an index of its own compiles to
// containment (`payload @> {...}`, store/query/compile.ts), which the GIN
// index on `resources.payload` (migration 0002) answers now. At an as_of the
// versions active at the point are partly in `resource_versions` (those
// replaced since), which had no such index: a filter with few matches
// walked every version of the type active at the point and filtered each,
// a cost that follows the store as it was then, not the answer
// (test/query/as-of-rare-value-plans.test.ts: 20,001 rows read, 4 matches).
// The same index on the versions bounds it by the matches. It costs only
// what replaces a version (an update, a delete, a restore): a create
// writes no version; docs/scaling.md has its size.
export const sql = `
CREATE INDEX resource_versions_payload_gin_idx ON resource_versions USING gin (payload jsonb_path_ops) WHERE NOT is_deleted;
`;
