// The patient/study registry, and the lookup index of artefacts.
//
// registry_patients: one row per registered (datasource_id, external uid).
//   identifier     text, "pat_" + 128 random bits (hex); never derived from the uid
//   datasource_id  text
//   uid_hash       bytea, HMAC-SHA256 of the external uid under the server's
//                  registry secret; the uid itself is never stored
//   registered_at  timestamptz
// registry_studies: the same for (registered patient, external uid), "stu_...".
//
// Both unique constraints are what makes registration race-free: an insert
// with ON CONFLICT DO NOTHING either allocates or finds the pair taken.
//
// registry_secret: on PostgreSQL without REGISTRY_SECRET, the generated key,
//   kept where every service process on the database finds the same one.
//
// The artefact indexes serve /artefacts/latest (now and at as_of): the
// succeeded artefacts of one repo, branch and path, newest first.
export const sql = `
CREATE TABLE registry_patients (
  identifier text COLLATE "C" PRIMARY KEY,
  datasource_id text COLLATE "C" NOT NULL,
  uid_hash bytea NOT NULL,
  registered_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (datasource_id, uid_hash)
);

CREATE TABLE registry_studies (
  identifier text COLLATE "C" PRIMARY KEY,
  patient_identifier text COLLATE "C" NOT NULL REFERENCES registry_patients (identifier),
  uid_hash bytea NOT NULL,
  registered_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (patient_identifier, uid_hash)
);

CREATE TABLE registry_secret (
  id boolean PRIMARY KEY DEFAULT true CHECK (id),
  secret text NOT NULL
);

CREATE INDEX resources_artefact_latest_idx ON resources
  ((payload->>'repo'), (payload->>'branch'), (payload->>'path'), created_at DESC, identifier DESC)
  WHERE payload_type = 'artefact' AND payload->>'status' = 'succeeded';
CREATE INDEX resource_versions_artefact_latest_idx ON resource_versions
  ((payload->>'repo'), (payload->>'branch'), (payload->>'path'), created_at DESC)
  WHERE payload_type = 'artefact' AND payload->>'status' = 'succeeded';
`;
