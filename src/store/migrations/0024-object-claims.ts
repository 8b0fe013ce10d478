// Object keys bound to their resources, and upload roots bound to who
// started them (docs/contract/18-access.md, object storage).
//
// An object path is reached through a resource that names it (a file's or
// dataset's `path`, an artefact's `uri`), but every writer can name any path
// in a resource of its own. So a path is answered for only when no resource
// the caller may not see names it, now or in any earlier version (store/objects.ts).
// These indexes find every resource and every version that names a path,
// tombstones included, by one expression: the `resources` GIN index only
// holds active rows and cannot answer for the history.
//
// upload_roots: the `{group}/{id}/` prefix of each upload-dir, with the
// actor that started it. Resuming (`root` given) hands PUT URLs only to that
// actor; a root started before this migration is not listed and cannot be
// resumed (a fresh upload-dir is one call away).
export const sql = `
CREATE INDEX resources_object_path_idx ON resources
  ((CASE payload_type WHEN 'artefact' THEN payload->>'uri' ELSE payload->>'path' END))
  WHERE payload_type IN ('file', 'dataset', 'artefact');
CREATE INDEX resource_versions_object_path_idx ON resource_versions
  ((CASE payload_type WHEN 'artefact' THEN payload->>'uri' ELSE payload->>'path' END))
  WHERE payload_type IN ('file', 'dataset', 'artefact');

CREATE TABLE upload_roots (
  prefix text COLLATE "C" PRIMARY KEY,
  actor text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
`;
