// The registry's HMAC keys: where they come from, and the start-up check
// that they are the keys the stored hashes need (docs/contract/06-registry.md).
//
// Configured keys (config.ts) win. Without them:
// - PostgreSQL: start-up fails. The key never lives in the database it
//   protects: a dump or a read replica would carry both the hashes and the
//   key to recompute them for every plausible uid. A key an earlier version
//   generated into the database (registry_secret) fails start-up too, with
//   the way out: moveRegistryKeyOut (`resource-store registry move-key-out`).
// - PGlite with a data directory: a generated key in `${dataDir}/registry-secret`
//   (mode 0600), beside the database but outside it, so a copy of the data
//   files alone does not carry the key.
// - PGlite in memory: a key for this process only, like its data.
//
// Then every start-up checks the keys against the store (checkRegistryKeys):
// a key whose id the store knows with another fingerprint, or a missing key
// that some stored row's chain needs, stops it naming the key id.
import { randomBytes } from "node:crypto";
import { link, mkdir, readFile, unlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DEFAULT_REGISTRY_KEY_ID, type RegistryKeyConfig } from "../config.js";
import type { Db, Queryable } from "./db.js";
import { chainName, keyFingerprint, type RegistryKey } from "./registry-hash.js";

/** The embedded store's generated key, under its data directory. */
export const REGISTRY_SECRET_FILE = "registry-secret";

/** Start-up refused over the registry key; the message names variables and key ids, never a key. */
export class RegistryKeyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RegistryKeyError";
  }
}

const KEY_VARIABLES =
  "REGISTRY_SECRET or REGISTRY_SECRET_FILE (one key), or REGISTRY_SECRETS or REGISTRY_SECRETS_FILE (id:key,... the first hashing new rows)";

export const MISSING_KEY_MESSAGE =
  `the registry key is not configured: on PostgreSQL it must come from ${KEY_VARIABLES}; ` +
  "it is never generated into the database it protects";

const KEEP_MOVED_KEY =
  "keep it in a secret file named by REGISTRY_SECRET_FILE (or in REGISTRY_SECRET; " +
  `in a REGISTRY_SECRETS list its id is "${DEFAULT_REGISTRY_KEY_ID}")`;

export const KEY_IN_DATABASE_MESSAGE =
  "the registry key is stored in the database it protects (table registry_secret), where a dump or a replica carries it. " +
  "Move it out: with DATABASE_URL set, run `resource-store registry move-key-out` once (it prints the key, then deletes it " +
  `from the database), ${KEEP_MOVED_KEY}, and start again`;

/** What move-key-out tells the operator beside the key it prints. */
export const MOVED_KEY_GUIDANCE = `The registry key below is deleted from the database once it is printed: ${KEEP_MOVED_KEY}. It is not shown again.`;

export function keyNotConfiguredMessage(id: string): string {
  return (
    `registry key ${id} hashed stored rows but is not configured: list it (${KEY_VARIABLES}). ` +
    "REGISTRY_SECRET and REGISTRY_SECRET_FILE hold one whole key, known as " +
    `"${DEFAULT_REGISTRY_KEY_ID}". A key can be left out only once no row depends on it (\`resource-store registry keys\`)`
  );
}

export function keyFingerprintMessage(id: string): string {
  return (
    `registry key ${id} is not the key this store knows by that id (its fingerprint differs): ` +
    "configure the key that id named, or give a new key a new id"
  );
}

export interface RegistryKeysOptions {
  /** config.registryKeys, the one hashing new rows first. */
  readonly configured: readonly RegistryKeyConfig[] | undefined;
  readonly db: Db;
  /** The embedded store's directory (db.dataDir); unset = in memory. */
  readonly dataDir: string | undefined;
}

const generate = () => randomBytes(32).toString("base64url");

/** The registry's keys, the one hashing new rows first, checked against the store; throws RegistryKeyError when start-up must stop. */
export async function loadRegistryKeys(options: RegistryKeysOptions): Promise<RegistryKey[]> {
  const { db } = options;
  if (!db.capabilities.embedded && (await keyInDatabase(db))) throw new RegistryKeyError(KEY_IN_DATABASE_MESSAGE);
  let keys: RegistryKey[];
  if (options.configured !== undefined && options.configured.length > 0) {
    keys = options.configured.map((k) => ({ id: k.id, secret: Buffer.from(k.secret, "utf8") }));
  } else {
    if (!db.capabilities.embedded) throw new RegistryKeyError(MISSING_KEY_MESSAGE);
    if (options.dataDir !== undefined) await refuseToGenerateFor(db, options.dataDir);
    const secret = options.dataDir !== undefined ? await fromFile(options.dataDir) : generate();
    keys = [{ id: DEFAULT_REGISTRY_KEY_ID, secret: Buffer.from(secret, "utf8") }];
  }
  await checkRegistryKeys(db, keys);
  return keys;
}

// Start-up checks of several processes serialize on this (bigint) lock.
const KEY_CHECK_LOCK = 7_362_918_031;

/**
 * Completes the chains of rows from before chains were recorded, compares
 * fingerprints, makes sure every key a stored row depends on is listed,
 * then records the fingerprints of new keys and the chain of the key that
 * hashes new rows. All or nothing, in one transaction.
 */
export async function checkRegistryKeys(db: Db, keys: readonly RegistryKey[]): Promise<void> {
  const [first] = keys;
  if (first === undefined) throw new RegistryKeyError(MISSING_KEY_MESSAGE);
  await keepingOwnErrors(db, async (tx) => {
    await tx.query("SELECT pg_advisory_xact_lock($1::bigint)", [KEY_CHECK_LOCK]);
    await completeLegacyChains(tx, keys);

    const { rows: known } = await tx.query<{ key_id: string; fingerprint: Uint8Array }>(
      "SELECT key_id, fingerprint FROM registry_keys",
    );
    const stored = new Map(known.map((r) => [r.key_id, Buffer.from(r.fingerprint)]));
    for (const key of keys) {
      const fingerprint = stored.get(key.id);
      if (fingerprint !== undefined && !fingerprint.equals(keyFingerprint(key)))
        throw new RegistryKeyError(keyFingerprintMessage(key.id));
    }

    const listed = new Set(keys.map((k) => k.id));
    for (const id of await keysRowsDependOn(tx))
      if (!listed.has(id)) throw new RegistryKeyError(keyNotConfiguredMessage(id));

    const fresh = keys.filter((k) => !stored.has(k.id));
    if (fresh.length > 0) {
      await tx.query(
        `INSERT INTO registry_keys (key_id, fingerprint)
         SELECT id, decode(fp, 'hex') FROM unnest($1::text[], $2::text[]) AS v(id, fp) ON CONFLICT (key_id) DO NOTHING`,
        [fresh.map((k) => k.id), fresh.map((k) => keyFingerprint(k).toString("hex"))],
      );
    }
    await ensureChain(tx, [first.id]);
  });
}

/**
 * A transaction whose refusals reach the caller as thrown (db.transaction
 * turns what it does not know into an internal error for clients; these
 * are for the operator at start-up or at the command line).
 */
async function keepingOwnErrors<T>(db: Db, fn: (tx: Queryable) => Promise<T>): Promise<T> {
  let own: unknown;
  try {
    return await db.transaction(async (tx) => {
      try {
        return await fn(tx);
      } catch (err) {
        own = err;
        throw err;
      }
    });
  } catch (err) {
    throw own ?? err;
  }
}

/** Records a chain (before any row refers to it: resolves elsewhere learn of it from the set's change). */
export async function ensureChain(db: Queryable, ids: readonly string[]): Promise<string> {
  const name = chainName(ids);
  await db.query(
    `INSERT INTO registry_key_chains (chain, key_ids) SELECT $1, $2::text[]
      WHERE NOT EXISTS (SELECT 1 FROM registry_key_chains WHERE chain = $1) ON CONFLICT (chain) DO NOTHING`,
    [name, ids],
  );
  return name;
}

// Rows of an earlier version hold the id of the last key of their chain, and
// that version's chain ran from the last listed key to the first: with the
// keys it ran with (this start-up's, the first after the upgrade), the chain
// of each of those ids is known. Rows whose chain had more than one key are
// renamed to their chain's full name, so the short name stays free for the
// one-key chain a key hashes new rows with.
async function completeLegacyChains(tx: Queryable, keys: readonly RegistryKey[]): Promise<void> {
  const { rows } = await tx.query<{ chain: string }>(
    "SELECT chain FROM registry_key_chains WHERE key_ids IS NULL ORDER BY chain",
  );
  if (rows.length === 0) return;
  const oldestFirst = keys.map((k) => k.id).reverse();
  for (const { chain: id } of rows) {
    const at = oldestFirst.indexOf(id);
    if (at < 0) throw new RegistryKeyError(keyNotConfiguredMessage(id));
    const ids = oldestFirst.slice(0, at + 1);
    const name = chainName(ids);
    if (name === id) {
      await tx.query("UPDATE registry_key_chains SET key_ids = $2::text[] WHERE chain = $1", [id, ids]);
      continue;
    }
    await ensureChain(tx, ids);
    for (const table of ["registry_patients", "registry_studies"]) {
      await tx.query(`UPDATE ${table} SET key_chain = $2 WHERE key_chain = $1`, [id, name]);
    }
    await tx.query("DELETE FROM registry_key_chains WHERE chain = $1", [id]);
  }
}

const CHAIN_USED =
  "(EXISTS (SELECT 1 FROM registry_patients p WHERE p.key_chain = c.chain) OR EXISTS (SELECT 1 FROM registry_studies s WHERE s.key_chain = c.chain))";

/** The ids of every key some stored row's hash depends on. */
async function keysRowsDependOn(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ key_id: string }>(
    `SELECT DISTINCT k AS key_id FROM registry_key_chains c CROSS JOIN LATERAL unnest(c.key_ids) AS k WHERE ${CHAIN_USED} ORDER BY 1`,
  );
  return rows.map((r) => r.key_id);
}

/** One line of `resource-store registry keys`: ids and counts, never a key. */
export interface RegistryKeyStatus {
  readonly id: string;
  /** Listed in the configuration given. */
  readonly configured: boolean;
  /** The listed key that hashes new rows. */
  readonly hashesNewRows: boolean;
  /** "recorded" (matches), "differs", or "none" (the store has no fingerprint for this id). */
  readonly fingerprint: "recorded" | "differs" | "none";
  /** Stored rows (patients and studies) whose hash depends on this key: 0 = it can be dropped. */
  readonly rows: number;
}

/** Every key id the configuration lists or the store knows, with the rows depending on it. */
export async function registryKeyStatus(db: Queryable, keys: readonly RegistryKey[]): Promise<RegistryKeyStatus[]> {
  const { rows: counts } = await db.query<{ key_id: string; n: string }>(
    `SELECT k AS key_id, sum(n)::text AS n FROM (
       SELECT c.key_ids,
              (SELECT count(*) FROM registry_patients p WHERE p.key_chain = c.chain)
            + (SELECT count(*) FROM registry_studies s WHERE s.key_chain = c.chain) AS n
         FROM registry_key_chains c) x
     CROSS JOIN LATERAL (SELECT DISTINCT unnest(x.key_ids) AS k) u GROUP BY k`,
  );
  const { rows: known } = await db.query<{ key_id: string; fingerprint: Uint8Array }>(
    "SELECT key_id, fingerprint FROM registry_keys",
  );
  const stored = new Map(known.map((r) => [r.key_id, Buffer.from(r.fingerprint)]));
  const rowsOf = new Map(counts.map((r) => [r.key_id, Number(r.n)]));
  const ids = [...new Set([...keys.map((k) => k.id), ...stored.keys(), ...rowsOf.keys()])];
  return ids.map((id) => {
    const key = keys.find((k) => k.id === id);
    const fp = stored.get(id);
    return {
      id,
      configured: key !== undefined,
      hashesNewRows: keys[0]?.id === id,
      fingerprint:
        fp === undefined ? "none" : key === undefined || fp.equals(keyFingerprint(key)) ? "recorded" : "differs",
      rows: rowsOf.get(id) ?? 0,
    };
  });
}

async function keyInDatabase(db: Queryable): Promise<boolean> {
  const { rows } = await db.query<{ n: string }>("SELECT count(*)::text AS n FROM registry_secret");
  return rows[0]?.n !== "0";
}

/**
 * Hands the key an earlier version kept in the database to `show`, and
 * deletes it only once `show` has resolved (the operator has it): a failure
 * to show it leaves it in the database. Answers whether there was one.
 */
export async function moveRegistryKeyOut(db: Db, show: (key: string) => Promise<void>): Promise<boolean> {
  return keepingOwnErrors(db, async (tx) => {
    // Locked, so that two runs at once never both print and then both find nothing to delete.
    const { rows } = await tx.query<{ secret: string }>("SELECT secret FROM registry_secret FOR UPDATE");
    const secret = rows[0]?.secret;
    if (secret === undefined) return false;
    await show(secret);
    await tx.query("DELETE FROM registry_secret WHERE secret = $1", [secret]);
    return true;
  });
}

/**
 * An embedded store without its key file whose registry already knows keys
 * (restored from another store, say moved back from PostgreSQL) must be
 * given them: a generated key would be refused for its fingerprint anyway,
 * and its file would stay behind. Nothing is written here.
 */
async function refuseToGenerateFor(db: Db, dataDir: string): Promise<void> {
  if ((await readSecret(join(dataDir, REGISTRY_SECRET_FILE))) !== undefined) return;
  const { rows } = await db.query<{ key_id: string }>("SELECT key_id FROM registry_keys ORDER BY key_id");
  if (rows.length === 0) return;
  throw new RegistryKeyError(
    `this store's registry was hashed under key id${rows.length > 1 ? "s" : ""} ${rows.map((r) => r.key_id).join(", ")} (restored from another store?) ` +
      `and ${join(dataDir, REGISTRY_SECRET_FILE)} does not exist: give the key${rows.length > 1 ? "s" : ""} the source ran with ` +
      "(REGISTRY_SECRET, REGISTRY_SECRET_FILE, REGISTRY_SECRETS or REGISTRY_SECRETS_FILE), or write a single `default` key into that file (mode 0600)",
  );
}

async function fromFile(dataDir: string): Promise<string> {
  const file = join(dataDir, REGISTRY_SECRET_FILE);
  const existing = await readSecret(file);
  if (existing !== undefined) return existing;
  await mkdir(dataDir, { recursive: true });
  // Written aside, then linked into place: link() never replaces, so of two
  // processes starting together one key wins whole and the other reads it.
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString("hex")}`;
  await writeFile(tmp, generate(), { flag: "wx", mode: 0o600 });
  try {
    await link(tmp, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  } finally {
    await unlink(tmp).catch(() => {});
  }
  const created = await readSecret(file);
  if (created === undefined) throw new Error("registry secret file is empty");
  return created;
}

async function readSecret(file: string): Promise<string | undefined> {
  try {
    const text = (await readFile(file, "utf8")).trim();
    return text === "" ? undefined : text;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}
