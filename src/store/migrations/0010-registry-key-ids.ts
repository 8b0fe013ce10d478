// Registry key rotation (docs/contract/06-registry.md): every row records the id of the key its
// uid_hash was made with. Rows from before hold the one key of that time,
// whose id is "default" (REGISTRY_SECRET, the generated file, or the key
// moved out of registry_secret). `resource-store registry rehash` moves rows
// to the newest key; the index finds the rows still to move.
export const sql = `
ALTER TABLE registry_patients ADD COLUMN key_id text COLLATE "C" NOT NULL DEFAULT 'default';
ALTER TABLE registry_studies ADD COLUMN key_id text COLLATE "C" NOT NULL DEFAULT 'default';
CREATE INDEX registry_patients_key_idx ON registry_patients (key_id, identifier);
CREATE INDEX registry_studies_key_idx ON registry_studies (key_id, identifier);
`;
