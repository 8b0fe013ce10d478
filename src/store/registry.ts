// Server-allocated identifiers for patients and studies. External uids are
// kept only as HMAC-SHA256 under the registry keys, with the scope (the
// datasource, or the patient) in the hashed message, so one uid registered
// under two datasources gives unrelated hashes. Each row names the chain of
// keys its hash went through (registry-hash.ts); new rows are hashed by the
// first listed key alone.
//
// Allocation is one INSERT ... ON CONFLICT DO NOTHING RETURNING: the unique
// constraints decide between concurrent registrations of the same pair, on
// one connection or across service processes. Never read-then-insert: the
// NOT EXISTS beside it refuses a uid stored under another chain.
//
// A process keeps the set of chains it hashes with, and every statement that
// looks a uid up also reads the set's version: when a rehash elsewhere has
// recorded a new chain (always before moving a row onto it), the answer
// "not there" is not trusted, the set is read again and the statement retried.
import { randomBytes } from "node:crypto";
import type { Grants } from "../access/index.js";
import { failedPrecondition, invalidArgument, outsideGrants, unavailable } from "../errors.js";
import { checkIdentifier } from "../schema/validate.js";
import type { Db, Queryable } from "./db.js";
import { chainHash, wrapHash, type RegistryKey, type UidKind } from "./registry-hash.js";
import { ensureChain } from "./registry-keys.js";
import { grantsDatasource, visibleNow } from "./visibility.js";

/** Longest datasource_id or external_uid accepted, in characters. */
const MAX_REGISTRY_VALUE_LENGTH = 1024;

/**
 * Every method takes the caller's grants (docs/contract/18-access.md): registering
 * needs the datasource granted (403 OUTSIDE_GRANTS otherwise); a patient of
 * a datasource not granted, or whose resource the caller may not see, is
 * answered for as one not registered.
 */
export interface Registry {
  registerPatient(grants: Grants, datasourceId: string, externalUid: string): Promise<string>;
  resolvePatient(grants: Grants, datasourceId: string, externalUid: string): Promise<string>;
  registerStudy(grants: Grants, patientIdentifier: string, externalUid: string): Promise<string>;
  resolveStudy(grants: Grants, patientIdentifier: string, externalUid: string): Promise<string>;
}

/**
 * Over a registry_patients row aliased `p`: the caller may see that patient
 * (its datasource granted, and its resource, if one exists, visible now).
 */
function patientVisible(grants: Grants, p: string): string {
  const parts: string[] = [];
  if (grants.datasources !== "all") {
    const ids = [...grants.datasources].map((id) => `'${id.replaceAll("'", "''")}'`);
    parts.push(ids.length === 0 ? "false" : `${p}.datasource_id IN (${ids.join(", ")})`);
  }
  const now = visibleNow(grants, "pr");
  if (now !== undefined)
    parts.push(`NOT EXISTS (SELECT 1 FROM resources pr WHERE pr.identifier = ${p}.identifier AND NOT ${now})`);
  return parts.length === 0 ? "true" : parts.join(" AND ");
}

export interface RegistryOptions {
  readonly db: Db;
  /** The HMAC keys (loadRegistryKeys), the one hashing new rows first. */
  readonly keys: readonly RegistryKey[];
}

/** "pat" or "stu" and 128 random bits in hex: nothing about the uid is in it. */
function allocateIdentifier(prefix: "pat" | "stu"): string {
  return `${prefix}_${randomBytes(16).toString("hex")}`;
}

function checkValue(value: string, what: string): string {
  if (value.length === 0) throw invalidArgument(`${what} is required`);
  if (value.length > MAX_REGISTRY_VALUE_LENGTH) {
    throw invalidArgument(`${what} is longer than ${MAX_REGISTRY_VALUE_LENGTH} characters`);
  }
  return value;
}

interface Chain {
  readonly name: string;
  readonly ids: readonly string[];
  readonly keys: readonly RegistryKey[];
}

interface ChainSet {
  /** The set's identity (its seq numbers): any chain added or removed changes it. */
  readonly version: string;
  /** The chains this process can compute. */
  readonly chains: readonly Chain[];
  /** Ids of keys this process lacks that stored rows depend on: their rows cannot be looked up here. */
  readonly missing: readonly string[];
}

const VERSION = "(SELECT coalesce(string_agg(seq::text, ',' ORDER BY seq), '') FROM registry_key_chains)";

async function readChains(db: Queryable, keys: readonly RegistryKey[]): Promise<ChainSet> {
  const { rows } = await db.query<{ chain: string; key_ids: string[] | null; used: boolean; version: string }>(
    `SELECT c.chain, c.key_ids,
            EXISTS (SELECT 1 FROM registry_patients p WHERE p.key_chain = c.chain)
         OR EXISTS (SELECT 1 FROM registry_studies s WHERE s.key_chain = c.chain) AS used,
            ${VERSION} AS version
       FROM registry_key_chains c ORDER BY c.seq`,
  );
  const byId = new Map(keys.map((k) => [k.id, k]));
  const chains: Chain[] = [];
  const missing = new Set<string>();
  for (const r of rows) {
    const ids = r.key_ids ?? [r.chain];
    const chainKeys = ids.map((id) => byId.get(id));
    if (r.key_ids !== null && chainKeys.every((k) => k !== undefined)) {
      chains.push({ name: r.chain, ids, keys: chainKeys });
    } else if (r.used) {
      for (const id of ids) if (!byId.has(id)) missing.add(id);
      if (r.key_ids === null) missing.add(r.chain);
    }
  }
  return { version: rows[0]?.version ?? "", chains, missing: [...missing] };
}

function keyList(keys: readonly RegistryKey[] | undefined): readonly RegistryKey[] {
  if (keys === undefined || keys.length === 0) throw new Error("the registry needs a key");
  return keys;
}

const hexes = (hashes: readonly Buffer[]) => hashes.map((h) => h.toString("hex"));
const ANY_HASH = (param: string) => `(SELECT decode(h, 'hex') FROM unnest(${param}::text[]) AS h)`;

// Registrations of one uid serialize on advisory locks named by its one-key
// hash under each listed key, taken in one order: two processes that hash
// new rows with different keys (mid-way through a restart onto a new first
// key) still take the lock of every key both list, so they never register
// one uid twice. The two-int form keeps clear of the service's bigint locks.
const REGISTER_LOCK_CLASS = 736_291;

function lockIds(keys: readonly RegistryKey[], kind: UidKind, scope: string, uid: string): number[] {
  const ids = keys.map((k) => chainHash([k], kind, scope, uid).readInt32BE(0));
  return [...new Set(ids)].sort((a, b) => a - b);
}

async function lockUid(tx: Queryable, ids: readonly number[]): Promise<void> {
  // unnest yields the array in order, so every process takes the locks in one order.
  await tx.query("SELECT pg_advisory_xact_lock($1::int, l) FROM unnest($2::int[]) AS l", [REGISTER_LOCK_CLASS, ids]);
}

/** How many times a statement is retried because the chain set changed under it (a rehash elsewhere). */
const MAX_CHAIN_RETRIES = 5;

export function createRegistry(options: RegistryOptions): Registry {
  const { db } = options;
  const keys = keyList(options.keys);
  const first = keys[0] as RegistryKey;
  let current: Promise<ChainSet> | undefined;
  const chainSet = (): Promise<ChainSet> => {
    if (current === undefined) {
      const loading = (async () => {
        // The chain new rows go under exists before any row refers to it (loadRegistryKeys records it too).
        await ensureChain(db, [first.id]);
        return readChains(db, keys);
      })();
      // A failed read is not kept: the next call tries again.
      loading.catch(() => {
        if (current === loading) current = undefined;
      });
      current = loading;
    }
    return current;
  };
  /** Whether the set changed since `seen` was read; if so, the next call reads it again. */
  const changed = (seen: ChainSet, version: string) => {
    if (version === seen.version) return false;
    current = undefined;
    return true;
  };
  const lacking = (set: ChainSet) => {
    if (set.missing.length > 0) {
      // Ids only. Another process hashes with a key this one was not given.
      throw unavailable(
        `stored registry rows depend on key ${set.missing.join(", ")}, which this service process does not list: restart it with every key`,
      );
    }
  };

  /** `visible`: a condition on the row (aliased x) the caller may see; the registry's access rule. */
  async function resolve(
    kind: UidKind,
    table: string,
    scopeColumn: string,
    scope: string,
    uid: string,
    visible: string,
  ): Promise<string | undefined> {
    for (let attempt = 0; ; attempt++) {
      const set = await chainSet();
      const hashes = set.chains.map((c) => chainHash(c.keys, kind, scope, uid));
      const { rows } = await db.query<{ identifier: string | null; version: string }>(
        `SELECT (SELECT x.identifier FROM ${table} x WHERE x.${scopeColumn} = $1 AND x.uid_hash IN ${ANY_HASH("$2")} AND ${visible} LIMIT 1) AS identifier,
                ${VERSION} AS version`,
        [scope, hexes(hashes)],
      );
      const row = rows[0];
      if (row?.identifier) return row.identifier;
      if (row !== undefined && changed(set, row.version) && attempt < MAX_CHAIN_RETRIES) continue;
      lacking(set);
      return undefined;
    }
  }

  /** Inserts unless the uid is stored under any chain; undefined = refused (registered already, or no such patient). */
  async function register(
    kind: UidKind,
    scope: string,
    uid: string,
    insert: (tx: Queryable, args: unknown[]) => Promise<string | undefined>,
  ) {
    const locks = lockIds(keys, kind, scope, uid);
    const hash = chainHash([first], kind, scope, uid);
    for (let attempt = 0; ; attempt++) {
      const set = await chainSet();
      lacking(set);
      const hashes = set.chains.map((c) => chainHash(c.keys, kind, scope, uid));
      const id = await db.transaction(async (tx) => {
        await lockUid(tx, locks);
        return insert(tx, [
          allocateIdentifier(kind === "patient" ? "pat" : "stu"),
          scope,
          hash,
          first.id,
          hexes(hashes),
          set.version,
        ]);
      });
      if (id !== undefined) return id;
      // Refused: registered already, or the chain set changed under the statement (then look again).
      const { rows } = await db.query<{ version: string }>(`SELECT ${VERSION} AS version`);
      if (changed(set, rows[0]?.version ?? "") && attempt < MAX_CHAIN_RETRIES) continue;
      return undefined;
    }
  }

  const patientArgs = (datasourceId: string, externalUid: string) => {
    checkValue(datasourceId, "datasource_id");
    checkValue(externalUid, "external_uid");
  };
  const studyArgs = (patientIdentifier: string, externalUid: string) => {
    checkValue(patientIdentifier, "patient_identifier");
    checkIdentifier(patientIdentifier, "patient_identifier");
    checkValue(externalUid, "external_uid");
  };

  return {
    async registerPatient(grants, datasourceId, externalUid) {
      patientArgs(datasourceId, externalUid);
      if (!grantsDatasource(grants, datasourceId)) throw outsideGrants([datasourceId]);
      const id = await register("patient", datasourceId, externalUid, async (tx, args) => {
        const { rows } = await tx.query<{ identifier: string }>(
          `INSERT INTO registry_patients (identifier, datasource_id, uid_hash, key_chain)
           SELECT $1, $2, $3, $4
            WHERE NOT EXISTS (SELECT 1 FROM registry_patients WHERE datasource_id = $2 AND uid_hash IN ${ANY_HASH("$5")})
              AND ${VERSION} = $6
           ON CONFLICT DO NOTHING RETURNING identifier`,
          args,
        );
        return rows[0]?.identifier;
      });
      if (id === undefined) throw failedPrecondition("this patient is registered already", "ALREADY_REGISTERED");
      return id;
    },
    async resolvePatient(grants, datasourceId, externalUid) {
      patientArgs(datasourceId, externalUid);
      const id = await resolve(
        "patient",
        "registry_patients",
        "datasource_id",
        datasourceId,
        externalUid,
        patientVisible(grants, "x"),
      );
      if (id === undefined) throw failedPrecondition("this patient is not registered", "NOT_REGISTERED");
      return id;
    },
    async registerStudy(grants, patientIdentifier, externalUid) {
      studyArgs(patientIdentifier, externalUid);
      // The patient must be registered: the SELECT yields no row otherwise.
      const id = await register("study", patientIdentifier, externalUid, async (tx, args) => {
        const { rows } = await tx.query<{ identifier: string }>(
          `INSERT INTO registry_studies (identifier, patient_identifier, uid_hash, key_chain)
           SELECT $1, p.identifier, $3, $4 FROM registry_patients p
            WHERE p.identifier = $2 AND ${patientVisible(grants, "p")}
              AND NOT EXISTS (SELECT 1 FROM registry_studies WHERE patient_identifier = $2 AND uid_hash IN ${ANY_HASH("$5")})
              AND ${VERSION} = $6
           ON CONFLICT DO NOTHING RETURNING identifier`,
          args,
        );
        return rows[0]?.identifier;
      });
      if (id !== undefined) return id;
      // Only to word the refusal: registered patients are never removed, so
      // the answer cannot change between the insert and this look.
      const { rows: patient } = await db.query(
        `SELECT 1 FROM registry_patients p WHERE p.identifier = $1 AND ${patientVisible(grants, "p")}`,
        [patientIdentifier],
      );
      if (patient.length === 0)
        throw failedPrecondition(`patient ${patientIdentifier} is not registered`, "NOT_REGISTERED");
      throw failedPrecondition("this study is registered already", "ALREADY_REGISTERED");
    },
    async resolveStudy(grants, patientIdentifier, externalUid) {
      studyArgs(patientIdentifier, externalUid);
      // The patient must be one the caller may see, and so must the study's own resource, if one exists.
      const now = visibleNow(grants, "sr");
      const own =
        now === undefined
          ? ""
          : ` AND NOT EXISTS (SELECT 1 FROM resources sr WHERE sr.identifier = x.identifier AND NOT ${now})`;
      const visible = `EXISTS (SELECT 1 FROM registry_patients p WHERE p.identifier = x.patient_identifier AND ${patientVisible(grants, "p")})${own}`;
      const id = await resolve(
        "study",
        "registry_studies",
        "patient_identifier",
        patientIdentifier,
        externalUid,
        visible,
      );
      if (id === undefined) throw failedPrecondition("this study is not registered", "NOT_REGISTERED");
      return id;
    },
  };
}

type RegistryTable = "registry_patients" | "registry_studies";
const TABLES: readonly RegistryTable[] = ["registry_patients", "registry_studies"];

export interface RehashOptions {
  /** Rows re-hashed per transaction (default 1000). */
  readonly batchSize?: number;
  /** Told after each batch (counts and key ids only). */
  readonly onBatch?: (progress: { table: RegistryTable; rows: number }) => void;
}

export interface RehashResult {
  readonly patients: number;
  readonly studies: number;
}

/** A rehash that cannot proceed with the keys it was given. */
export class RegistryRehashError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RegistryRehashError";
  }
}

function batchSizeOf(options: RehashOptions): number {
  const batchSize = options.batchSize ?? 1000;
  if (!Number.isInteger(batchSize) || batchSize < 1)
    throw invalidArgument("batch size must be a positive whole number");
  return batchSize;
}

async function chainsForRehash(db: Db, keys: readonly RegistryKey[]): Promise<ChainSet> {
  if (keys.length === 0) throw new Error("rehash needs the registry keys");
  const set = await readChains(db, keys);
  if (set.missing.length > 0) {
    throw new RegistryRehashError(
      `rows depend on key id ${set.missing.join(", ")}, which is not listed: list every key rows depend on`,
    );
  }
  return set;
}

/**
 * Wraps every stored hash whose chain does not end with the first listed key
 * in that key (chain [a] becomes [a, b]): after it, the store together with
 * any older key alone re-identifies nobody. It cannot move a row off a key
 * (the row's hash still needs every key of its chain): rederiveRegistry can.
 *
 * Online: the new chain is recorded before any row moves onto it, then rows
 * move in batches of one short transaction each; each row holds a hash of
 * some recorded chain before and after, so no resolve fails and no register
 * duplicates meanwhile. Every process must list the first key before this runs.
 */
export async function rehashRegistry(
  db: Db,
  keys: readonly RegistryKey[],
  options: RehashOptions = {},
): Promise<RehashResult> {
  const batchSize = batchSizeOf(options);
  const set = await chainsForRehash(db, keys);
  const target = keys[0] as RegistryKey;
  const counts = { registry_patients: 0, registry_studies: 0 };
  for (const chain of set.chains) {
    if (chain.ids[chain.ids.length - 1] === target.id) continue;
    const wrapped = await ensureChain(db, [...chain.ids, target.id]);
    for (const table of TABLES) {
      let after = "";
      for (;;) {
        const moved = await db.transaction(async (tx) => {
          const { rows } = await tx.query<{ identifier: string; uid_hash: Uint8Array }>(
            `SELECT identifier, uid_hash FROM ${table} WHERE key_chain = $1 AND identifier > $2 ORDER BY identifier LIMIT $3 FOR UPDATE`,
            [chain.name, after, batchSize],
          );
          if (rows.length === 0) return undefined;
          const ids = rows.map((r) => r.identifier);
          const hashes = rows.map((r) => wrapHash(target, Buffer.from(r.uid_hash)).toString("hex"));
          await tx.query(
            `UPDATE ${table} t SET uid_hash = decode(v.h, 'hex'), key_chain = $1
               FROM unnest($2::text[], $3::text[]) AS v(id, h) WHERE t.identifier = v.id`,
            [wrapped, ids, hashes],
          );
          return { n: rows.length, last: ids[ids.length - 1] as string };
        });
        if (moved === undefined) break;
        counts[table] += moved.n;
        after = moved.last;
        options.onBatch?.({ table, rows: moved.n });
      }
    }
  }
  return { patients: counts.registry_patients, studies: counts.registry_studies };
}

/** One uid to re-derive: the body of a register call. */
export type RegisteredUid =
  | { readonly datasourceId: string; readonly externalUid: string }
  | { readonly patientIdentifier: string; readonly externalUid: string };

export interface RederiveResult extends RehashResult {
  /** Given uids already hashed by the first key alone. */
  readonly unchanged: number;
  /** Given uids not registered. */
  readonly notFound: number;
}

/**
 * Re-hashes the rows of the given uids from the uid itself, under the first
 * listed key alone (chain [first]): the only way a row stops depending on an
 * older key, since a hash cannot be unwrapped. Online like rehashRegistry.
 */
export async function rederiveRegistry(
  db: Db,
  keys: readonly RegistryKey[],
  uids: AsyncIterable<RegisteredUid> | Iterable<RegisteredUid>,
  options: RehashOptions = {},
): Promise<RederiveResult> {
  const batchSize = batchSizeOf(options);
  const set = await chainsForRehash(db, keys);
  const target = keys[0] as RegistryKey;
  const targetChain = await ensureChain(db, [target.id]);
  const result = { patients: 0, studies: 0, unchanged: 0, notFound: 0 };
  const flush = async (table: RegistryTable, entries: { scope: string; uid: string }[]) => {
    if (entries.length === 0) return;
    const kind: UidKind = table === "registry_patients" ? "patient" : "study";
    const scopeColumn = table === "registry_patients" ? "datasource_id" : "patient_identifier";
    const fresh = new Map<string, string>();
    const scopes: string[] = [];
    const hashes: string[] = [];
    for (const e of entries) {
      const re = chainHash([target], kind, e.scope, e.uid).toString("hex");
      for (const c of set.chains) {
        const h = chainHash(c.keys, kind, e.scope, e.uid).toString("hex");
        fresh.set(`${e.scope}\n${h}`, re);
        scopes.push(e.scope);
        hashes.push(h);
      }
    }
    const moved = await db.transaction(async (tx) => {
      const { rows } = await tx.query<{ identifier: string; scope: string; hash: string; key_chain: string }>(
        `SELECT t.identifier, t.${scopeColumn} AS scope, encode(t.uid_hash, 'hex') AS hash, t.key_chain FROM ${table} t
          WHERE (t.${scopeColumn}, t.uid_hash) IN (SELECT s, decode(h, 'hex') FROM unnest($1::text[], $2::text[]) AS v(s, h))
          ORDER BY t.identifier FOR UPDATE`,
        [scopes, hashes],
      );
      const found = new Set(rows.map((r) => r.identifier));
      const todo = rows.filter((r) => r.key_chain !== targetChain);
      if (todo.length > 0) {
        await tx.query(
          `UPDATE ${table} t SET uid_hash = decode(v.h, 'hex'), key_chain = $1
             FROM unnest($2::text[], $3::text[]) AS v(id, h) WHERE t.identifier = v.id`,
          [targetChain, todo.map((r) => r.identifier), todo.map((r) => fresh.get(`${r.scope}\n${r.hash}`) as string)],
        );
      }
      return { found: found.size, moved: todo.length };
    });
    if (table === "registry_patients") result.patients += moved.moved;
    else result.studies += moved.moved;
    result.unchanged += moved.found - moved.moved;
    result.notFound += entries.length - moved.found;
    options.onBatch?.({ table, rows: moved.moved });
  };
  const pending: Record<RegistryTable, { scope: string; uid: string }[]> = {
    registry_patients: [],
    registry_studies: [],
  };
  const seen: Record<RegistryTable, Set<string>> = { registry_patients: new Set(), registry_studies: new Set() };
  for await (const u of uids) {
    checkValue(u.externalUid, "external_uid");
    let table: RegistryTable;
    let scope: string;
    if ("datasourceId" in u) {
      table = "registry_patients";
      scope = checkValue(u.datasourceId, "datasource_id");
    } else {
      table = "registry_studies";
      scope = checkValue(u.patientIdentifier, "patient_identifier");
    }
    // A uid given twice in one batch is one row.
    const seenKey = `${scope}\n${u.externalUid}`;
    if (seen[table].has(seenKey)) continue;
    seen[table].add(seenKey);
    pending[table].push({ scope, uid: u.externalUid });
    if (pending[table].length >= batchSize) {
      seen[table].clear();
      await flush(table, pending[table].splice(0));
    }
  }
  for (const table of TABLES) await flush(table, pending[table].splice(0));
  return result;
}
