// Indexes for equality and `in` on the identifying payload fields (docs/queries.md):
// path (file, dataset, artefact), sha256 (file), accession_number and
// study_date (study), datasource_id (patient). The query compiler
// (store/query/compile.ts, INDEXED_PAYLOAD_KEYS) renders eq and in on these
// as `((payload ->> key) COLLATE "C") = ...` plus the `IS NOT NULL` of the
// same expression, which the partial indexes' predicate names, so a
// prepared statement's generic plan may use them too.
//
// Why not the GIN index of 0002 alone: the planner cannot estimate a
// containment (a fixed 1% of the rows), so at 2M rows it walks a whole
// sort-order index for a LIMIT instead of fetching the few rows that match,
// and `= ANY` of an extracted value has no index at all. An expression index
// carries its own statistics (ANALYZE samples the expression), so the
// planner knows a path matches one row.
//
// The planner takes no statistics from a partial index, so each expression
// has a statistics object of its own (CREATE STATISTICS on one expression,
// PostgreSQL 14+): ANALYZE samples it, and the planner's estimate of
// `<expr> = $1` is the field's, not a guess. They take no space to speak of.
//
// Only rows that hold the field are indexed (the expression IS NOT NULL):
// each index costs what its field's resources hold. The history
// (resource_versions, superseded versions only) has the same indexes for
// reads at an as_of; the current rows of `resources` are the live ones
// (NOT is_deleted, as every current query filters tombstones out).
export const sql = `
CREATE INDEX resources_payload_path_idx ON resources (((payload ->> 'path') COLLATE "C"))
  WHERE NOT is_deleted AND ((payload ->> 'path') COLLATE "C") IS NOT NULL;
CREATE INDEX resources_payload_sha256_idx ON resources (((payload ->> 'sha256') COLLATE "C"))
  WHERE NOT is_deleted AND ((payload ->> 'sha256') COLLATE "C") IS NOT NULL;
CREATE INDEX resources_payload_accession_number_idx ON resources (((payload ->> 'accession_number') COLLATE "C"))
  WHERE NOT is_deleted AND ((payload ->> 'accession_number') COLLATE "C") IS NOT NULL;
CREATE INDEX resources_payload_study_date_idx ON resources (((payload ->> 'study_date') COLLATE "C"))
  WHERE NOT is_deleted AND ((payload ->> 'study_date') COLLATE "C") IS NOT NULL;
CREATE INDEX resources_payload_datasource_id_idx ON resources (((payload ->> 'datasource_id') COLLATE "C"))
  WHERE NOT is_deleted AND ((payload ->> 'datasource_id') COLLATE "C") IS NOT NULL;

CREATE INDEX resource_versions_payload_path_idx ON resource_versions (((payload ->> 'path') COLLATE "C"))
  WHERE ((payload ->> 'path') COLLATE "C") IS NOT NULL;
CREATE INDEX resource_versions_payload_sha256_idx ON resource_versions (((payload ->> 'sha256') COLLATE "C"))
  WHERE ((payload ->> 'sha256') COLLATE "C") IS NOT NULL;
CREATE INDEX resource_versions_payload_accession_number_idx ON resource_versions (((payload ->> 'accession_number') COLLATE "C"))
  WHERE ((payload ->> 'accession_number') COLLATE "C") IS NOT NULL;
CREATE INDEX resource_versions_payload_study_date_idx ON resource_versions (((payload ->> 'study_date') COLLATE "C"))
  WHERE ((payload ->> 'study_date') COLLATE "C") IS NOT NULL;
CREATE INDEX resource_versions_payload_datasource_id_idx ON resource_versions (((payload ->> 'datasource_id') COLLATE "C"))
  WHERE ((payload ->> 'datasource_id') COLLATE "C") IS NOT NULL;

CREATE STATISTICS resources_payload_path_stats ON ((payload ->> 'path') COLLATE "C") FROM resources;
CREATE STATISTICS resources_payload_sha256_stats ON ((payload ->> 'sha256') COLLATE "C") FROM resources;
CREATE STATISTICS resources_payload_accession_number_stats ON ((payload ->> 'accession_number') COLLATE "C") FROM resources;
CREATE STATISTICS resources_payload_study_date_stats ON ((payload ->> 'study_date') COLLATE "C") FROM resources;
CREATE STATISTICS resources_payload_datasource_id_stats ON ((payload ->> 'datasource_id') COLLATE "C") FROM resources;
CREATE STATISTICS resource_versions_payload_path_stats ON ((payload ->> 'path') COLLATE "C") FROM resource_versions;
CREATE STATISTICS resource_versions_payload_sha256_stats ON ((payload ->> 'sha256') COLLATE "C") FROM resource_versions;
CREATE STATISTICS resource_versions_payload_accession_number_stats ON ((payload ->> 'accession_number') COLLATE "C") FROM resource_versions;
CREATE STATISTICS resource_versions_payload_study_date_stats ON ((payload ->> 'study_date') COLLATE "C") FROM resource_versions;
CREATE STATISTICS resource_versions_payload_datasource_id_stats ON ((payload ->> 'datasource_id') COLLATE "C") FROM resource_versions;
`;
