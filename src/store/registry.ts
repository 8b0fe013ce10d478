// Server-allocated identifiers for patients and studies. External uids are
// kept only as HMAC-SHA256 under the registry keys, with the scope (the
// datasource, or the patient) in the hashed message, so one uid registered
// under two datasources gives unrelated hashes.
//
// Allocation is one INSERT ... ON CONFLICT DO NOTHING RETURNING: the unique
// constraints decide between concurrent registrations of the same pair, on
// one connection or across service processes. Never read-then-insert: the
// NOT EXISTS beside it only refuses a uid registered under an older key.
import { createHmac, randomBytes } from "node:crypto";
import { failedPrecondition, invalidArgument } from "../errors.js";
import { checkIdentifier } from "../schema/validate.js";
import type { Db, Queryable } from "./db.js";
import { DEFAULT_KEY_ID, type RegistryKey } from "./secrets.js";

/** Longest datasource_id or external_uid accepted, in characters. */
export const MAX_REGISTRY_VALUE_LENGTH = 1024;

export interface Registry {
  registerPatient(datasourceId: string, externalUid: string): Promise<string>;
  resolvePatient(datasourceId: string, externalUid: string): Promise<string>;
  registerStudy(patientIdentifier: string, externalUid: string): Promise<string>;
  resolveStudy(patientIdentifier: string, externalUid: string): Promise<string>;
}

export interface RegistryOptions {
  readonly db: Db;
  /** The HMAC keys, newest first (see secrets.ts). */
  readonly keys?: readonly RegistryKey[];
  /** One key alone (id "default"), instead of keys. */
  readonly secret?: Uint8Array;
}

/** "pat" or "stu" and 128 random bits in hex: nothing about the uid is in it. */
export function allocateIdentifier(prefix: "pat" | "stu"): string {
  return `${prefix}_${randomBytes(16).toString("hex")}`;
}

function checkValue(value: string, what: string): string {
  if (value.length === 0) throw invalidArgument(`${what} is required`);
  if (value.length > MAX_REGISTRY_VALUE_LENGTH) {
    throw invalidArgument(`${what} is longer than ${MAX_REGISTRY_VALUE_LENGTH} characters`);
  }
  return value;
}

// Several keys form a chain, oldest first: the oldest key hashes the uid
// (length-prefixed parts, so ("a", "bc") and ("ab", "c") never hash alike),
// each newer key hashes the hash before it. A row hashed with key i holds
// link i; rehashing a row to the newest key needs only the stored hash, never
// the uid, which the registry does not have. Every key of the chain stays
// listed; a stolen old key alone no longer finds rehashed rows.
interface Link {
  readonly id: string;
  readonly hash: Buffer;
}

function keyList(options: RegistryOptions): readonly RegistryKey[] {
  const keys = options.keys ?? (options.secret !== undefined ? [{ id: DEFAULT_KEY_ID, secret: Buffer.from(options.secret) }] : []);
  if (keys.length === 0) throw new Error("the registry needs a key");
  return keys;
}

/** The chain's links for one uid, oldest key first. */
function chain(keys: readonly RegistryKey[], kind: string, scope: string, uid: string): Link[] {
  const oldestFirst = [...keys].reverse();
  const first = oldestFirst[0] as RegistryKey;
  const h = createHmac("sha256", first.secret);
  for (const part of [kind, scope, uid]) {
    const bytes = Buffer.from(part, "utf8");
    const len = Buffer.alloc(4);
    len.writeUInt32BE(bytes.length);
    h.update(len).update(bytes);
  }
  const links: Link[] = [{ id: first.id, hash: h.digest() }];
  for (const key of oldestFirst.slice(1)) {
    links.push({ id: key.id, hash: createHmac("sha256", key.secret).update((links[links.length - 1] as Link).hash).digest() });
  }
  return links;
}

// Registrations of one uid serialize on an advisory lock named by the first
// link (every process shares the oldest key), so two processes whose newest
// keys differ during a rolling restart still never register one uid twice.
// The two-int form keeps clear of the service's other (bigint) lock keys.
const REGISTER_LOCK_CLASS = 736_291;

async function lockUid(tx: Queryable, links: readonly Link[]): Promise<void> {
  await tx.query("SELECT pg_advisory_xact_lock($1::int, $2::int)", [REGISTER_LOCK_CLASS, (links[0] as Link).hash.readInt32BE(0)]);
}

const hexes = (links: readonly Link[]) => links.map((l) => l.hash.toString("hex"));
const ANY_LINK = "(SELECT decode(h, 'hex') FROM unnest($5::text[]) AS h)";

export function createRegistry(options: RegistryOptions): Registry {
  const { db } = options;
  const keys = keyList(options);
  const patientArgs = (datasourceId: string, externalUid: string) => {
    checkValue(datasourceId, "datasource_id");
    checkValue(externalUid, "external_uid");
    return chain(keys, "patient", datasourceId, externalUid);
  };
  const studyArgs = (patientIdentifier: string, externalUid: string) => {
    checkValue(patientIdentifier, "patient_identifier");
    checkIdentifier(patientIdentifier, "patient_identifier");
    checkValue(externalUid, "external_uid");
    return chain(keys, "study", patientIdentifier, externalUid);
  };
  const newest = (links: readonly Link[]) => links[links.length - 1] as Link;

  return {
    async registerPatient(datasourceId, externalUid) {
      const links = patientArgs(datasourceId, externalUid);
      const { hash, id: keyId } = newest(links);
      // Not registered under any listed key, then inserted under the newest;
      // the unique constraint decides between concurrent inserts of one hash.
      const id = await db.transaction(async (tx) => {
        await lockUid(tx, links);
        const { rows } = await tx.query<{ identifier: string }>(
          `INSERT INTO registry_patients (identifier, datasource_id, uid_hash, key_id)
           SELECT $1, $2, $3, $4
            WHERE NOT EXISTS (SELECT 1 FROM registry_patients WHERE datasource_id = $2 AND uid_hash IN ${ANY_LINK})
           ON CONFLICT DO NOTHING RETURNING identifier`,
          [allocateIdentifier("pat"), datasourceId, hash, keyId, hexes(links)],
        );
        return rows[0]?.identifier;
      });
      if (id === undefined) throw failedPrecondition("this patient is registered already", "ALREADY_REGISTERED");
      return id;
    },
    async resolvePatient(datasourceId, externalUid) {
      const links = patientArgs(datasourceId, externalUid);
      const { rows } = await db.query<{ identifier: string }>(
        "SELECT identifier FROM registry_patients WHERE datasource_id = $1 AND uid_hash IN (SELECT decode(h, 'hex') FROM unnest($2::text[]) AS h)",
        [datasourceId, hexes(links)],
      );
      const id = rows[0]?.identifier;
      if (id === undefined) throw failedPrecondition("this patient is not registered", "NOT_REGISTERED");
      return id;
    },
    async registerStudy(patientIdentifier, externalUid) {
      const links = studyArgs(patientIdentifier, externalUid);
      const { hash, id: keyId } = newest(links);
      // The patient must be registered: the SELECT yields no row otherwise.
      const id = await db.transaction(async (tx) => {
        await lockUid(tx, links);
        const { rows } = await tx.query<{ identifier: string }>(
          `INSERT INTO registry_studies (identifier, patient_identifier, uid_hash, key_id)
           SELECT $1, p.identifier, $3, $4 FROM registry_patients p
            WHERE p.identifier = $2
              AND NOT EXISTS (SELECT 1 FROM registry_studies WHERE patient_identifier = $2 AND uid_hash IN ${ANY_LINK})
           ON CONFLICT DO NOTHING RETURNING identifier`,
          [allocateIdentifier("stu"), patientIdentifier, hash, keyId, hexes(links)],
        );
        return rows[0]?.identifier;
      });
      if (id !== undefined) return id;
      // Only to word the refusal: registered patients are never removed, so
      // the answer cannot change between the insert and this look.
      const { rows: patient } = await db.query("SELECT 1 FROM registry_patients WHERE identifier = $1", [patientIdentifier]);
      if (patient.length === 0) throw failedPrecondition(`patient ${patientIdentifier} is not registered`, "NOT_REGISTERED");
      throw failedPrecondition("this study is registered already", "ALREADY_REGISTERED");
    },
    async resolveStudy(patientIdentifier, externalUid) {
      const links = studyArgs(patientIdentifier, externalUid);
      const { rows } = await db.query<{ identifier: string }>(
        "SELECT identifier FROM registry_studies WHERE patient_identifier = $1 AND uid_hash IN (SELECT decode(h, 'hex') FROM unnest($2::text[]) AS h)",
        [patientIdentifier, hexes(links)],
      );
      const id = rows[0]?.identifier;
      if (id === undefined) throw failedPrecondition("this study is not registered", "NOT_REGISTERED");
      return id;
    },
  };
}

export interface RehashOptions {
  /** Rows re-hashed per transaction (default 1000). */
  readonly batchSize?: number;
  /** Told after each batch (counts only). */
  readonly onBatch?: (progress: { table: "registry_patients" | "registry_studies"; rows: number }) => void;
}

export interface RehashResult {
  readonly patients: number;
  readonly studies: number;
}

/**
 * Moves every row to the newest key, in batches of one short transaction
 * each, while the service runs: a row holds one link of its uid's chain
 * before and after its update, and resolve and register look for every
 * link, so no resolve fails and no register duplicates meanwhile. Every
 * process must list the new key before this runs.
 */
export async function rehashRegistry(db: Db, keys: readonly RegistryKey[], options: RehashOptions = {}): Promise<RehashResult> {
  if (keys.length === 0) throw new Error("rehash needs the registry keys");
  const batchSize = options.batchSize ?? 1000;
  if (!Number.isInteger(batchSize) || batchSize < 1) throw invalidArgument("batch size must be a positive whole number");
  const oldestFirst = [...keys].reverse();
  const position = new Map(oldestFirst.map((k, i) => [k.id, i]));
  const target = oldestFirst[oldestFirst.length - 1] as RegistryKey;
  const forward = (hash: Buffer, from: number): Buffer => {
    let h = hash;
    for (const key of oldestFirst.slice(from + 1)) h = createHmac("sha256", key.secret).update(h).digest();
    return h;
  };
  const unlisted = (id: string) => `rows are hashed with key id ${id}, which is not listed: list every key of the chain`;
  // Before changing anything: every row's key must be in the chain.
  const { rows: used } = await db.query<{ key_id: string }>(
    "SELECT DISTINCT key_id FROM registry_patients UNION SELECT DISTINCT key_id FROM registry_studies",
  );
  for (const { key_id } of used) if (!position.has(key_id)) throw new RegistryRehashError(unlisted(key_id));
  const counts = { registry_patients: 0, registry_studies: 0 };
  for (const table of ["registry_patients", "registry_studies"] as const) {
    let after = "";
    for (;;) {
      const moved = await db.transaction(async (tx) => {
        const { rows } = await tx.query<{ identifier: string; uid_hash: Uint8Array; key_id: string }>(
          `SELECT identifier, uid_hash, key_id FROM ${table}
            WHERE key_id <> $1 AND identifier > $2 ORDER BY identifier LIMIT $3 FOR UPDATE`,
          [target.id, after, batchSize],
        );
        if (rows.length === 0) return undefined;
        const ids: string[] = [];
        const hashes: string[] = [];
        for (const r of rows) {
          const at = position.get(r.key_id);
          // The id only: never a key or a hash. (A process with another key list wrote it meanwhile.)
          if (at === undefined) throw failedPrecondition(unlisted(r.key_id));
          ids.push(r.identifier);
          hashes.push(forward(Buffer.from(r.uid_hash), at).toString("hex"));
        }
        await tx.query(
          `UPDATE ${table} t SET uid_hash = decode(v.h, 'hex'), key_id = $1
             FROM unnest($2::text[], $3::text[]) AS v(id, h) WHERE t.identifier = v.id`,
          [target.id, ids, hashes],
        );
        return { n: rows.length, last: ids[ids.length - 1] as string };
      });
      if (moved === undefined) break;
      counts[table] += moved.n;
      after = moved.last;
      options.onBatch?.({ table, rows: moved.n });
    }
  }
  return { patients: counts.registry_patients, studies: counts.registry_studies };
}

/** A rehash that cannot proceed with the keys it was given. */
export class RegistryRehashError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RegistryRehashError";
  }
}
