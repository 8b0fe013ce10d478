// Registry keys, round two (docs/contract/06-registry.md).
//
// registry_keys: a fingerprint per key id (registry-hash.ts), so that start-up
//   refuses a key configured under an id the store knew with another key.
// registry_key_chains: each chain of key ids a stored hash went through, in
//   the order applied (registry-hash.ts); `seq` lets a service process tell
//   that the set changed since it last read it.
// The rows' key_id becomes key_chain, a reference to its chain: rows hashed
//   under one key hold that key's id, which is also that chain's name.
//
// Rows from before hold the id of the last key of the chain that hashed
// them, and that chain is known only from the key list configured then (the
// last listed key began it, each listed before wrapped it), which SQL cannot
// see: their chains are inserted here with key_ids NULL and completed from
// the configured keys at the next start-up (registry-keys.ts).
export const sql = `
CREATE TABLE registry_keys (
  key_id text COLLATE "C" PRIMARY KEY,
  fingerprint bytea NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE registry_key_chains (
  chain text COLLATE "C" PRIMARY KEY,
  key_ids text[] COLLATE "C",
  seq integer GENERATED ALWAYS AS IDENTITY UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE registry_patients RENAME COLUMN key_id TO key_chain;
ALTER TABLE registry_studies RENAME COLUMN key_id TO key_chain;
ALTER TABLE registry_patients ALTER COLUMN key_chain DROP DEFAULT;
ALTER TABLE registry_studies ALTER COLUMN key_chain DROP DEFAULT;
ALTER INDEX registry_patients_key_idx RENAME TO registry_patients_chain_idx;
ALTER INDEX registry_studies_key_idx RENAME TO registry_studies_chain_idx;

INSERT INTO registry_key_chains (chain, key_ids)
  SELECT key_chain, NULL::text[] FROM registry_patients UNION SELECT key_chain, NULL::text[] FROM registry_studies;

ALTER TABLE registry_patients ADD CONSTRAINT registry_patients_chain_fk FOREIGN KEY (key_chain) REFERENCES registry_key_chains (chain);
ALTER TABLE registry_studies ADD CONSTRAINT registry_studies_chain_fk FOREIGN KEY (key_chain) REFERENCES registry_key_chains (chain);
`;
