// Who wrote each version (docs/contract/19-audit-history.md).
//
// resources.actor, resource_versions.actor: the caller's actor (a JWT's sub,
//   a static token's actor: scope, token#N, or local with authentication
//   off), written by the statement that writes the version itself, never by a
//   second one. Versions written before this migration say `unknown`.
//
// The column keeps no default once filled: a write that does not name its
// actor fails instead of recording a made-up one. The supersede trigger
// carries the actor with the version into the history, and resource_history
// yields it (as its last column: a view can only grow at the end).
// The function keeps 0016's SET enable_nestloop = off (CREATE OR REPLACE
// would drop it otherwise).
export const sql = `
ALTER TABLE resources ADD COLUMN actor text NOT NULL DEFAULT 'unknown';
ALTER TABLE resources ALTER COLUMN actor DROP DEFAULT;
ALTER TABLE resource_versions ADD COLUMN actor text NOT NULL DEFAULT 'unknown';
ALTER TABLE resource_versions ALTER COLUMN actor DROP DEFAULT;

CREATE OR REPLACE FUNCTION resources_supersede() RETURNS trigger LANGUAGE plpgsql SET enable_nestloop = off AS $fn$
BEGIN
  INSERT INTO resource_versions (identifier, version, tx_from, tx_to, payload_type, parent_identifier, license,
      access_level, derived_from, payload, created_at, updated_at, is_deleted, deleted_by, actor)
  SELECT o.identifier, o.version, o.updated_at, n.updated_at, o.payload_type, o.parent_identifier, o.license,
      o.access_level, o.derived_from, o.payload, o.created_at, o.updated_at, o.is_deleted, o.deleted_by, o.actor
    FROM superseded o JOIN replacing n ON n.identifier = o.identifier
   WHERE n.version <> o.version;
  RETURN NULL;
END
$fn$;

CREATE OR REPLACE VIEW resource_history AS
  SELECT identifier, version, tx_from, tx_to, payload_type, parent_identifier, license, access_level,
      derived_from, payload, created_at, updated_at, is_deleted, deleted_by, actor
    FROM resource_versions
  UNION ALL
  SELECT identifier, version, updated_at, 'infinity'::timestamptz, payload_type, parent_identifier, license,
      access_level, derived_from, payload, created_at, updated_at, is_deleted, deleted_by, actor
    FROM resources;
`;
