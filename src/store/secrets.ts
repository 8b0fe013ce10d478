// The service's secrets, in one place: the cursor signing key and the
// registry's HMAC key.
//
// The cursor key: the configured one (CURSOR_SECRET), or one generated once
// and kept in the database (secrets) so every service process on it signs
// alike. The first writer wins; everyone reads what it wrote.
//
// The registry's HMAC keys (see registry.ts for how several are used),
// newest first. Configured ones (REGISTRY_SECRET, REGISTRY_SECRET_FILE,
// REGISTRY_SECRETS) win. Without them:
// - PostgreSQL: start-up fails. The key never lives in the database it
//   protects: a dump or a read replica would carry both the hashes and the
//   key to recompute them for every plausible uid. A key an earlier version
//   generated into the database (registry_secret) fails start-up too, with
//   the way out: moveRegistryKeyOut (`resource-store registry move-key-out`).
// - PGlite with a data directory: a generated key in `${dataDir}/registry-secret`
//   (mode 0600), beside the database but outside it, so a copy of the data
//   files alone does not carry the key.
// - PGlite in memory: a key for this process only, like its data.
import { randomBytes } from "node:crypto";
import { link, mkdir, readFile, unlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Db, Queryable } from "./db.js";

export const REGISTRY_SECRET_FILE = "registry-secret";
/** The id of a key given alone, generated, or moved out of the database (rows hashed before key ids existed carry it). */
export const DEFAULT_KEY_ID = "default";

/** One HMAC key of the registry and the id its rows record. */
export interface RegistryKey {
  readonly id: string;
  readonly secret: Buffer;
}

/** Start-up refused over the registry key; the message names the variables and never holds a key. */
export class RegistryKeyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RegistryKeyError";
  }
}

const KEY_VARIABLES = "REGISTRY_SECRET, REGISTRY_SECRET_FILE (a mounted secret file) or REGISTRY_SECRETS (id:key,... newest first)";

export const MISSING_KEY_MESSAGE =
  `the registry key is not configured: on PostgreSQL it must come from ${KEY_VARIABLES}; ` +
  "it is never generated into the database it protects";

export const KEY_IN_DATABASE_MESSAGE =
  "the registry key is stored in the database it protects (table registry_secret), where a dump or a replica carries it. " +
  "Move it out: with DATABASE_URL set, run `resource-store registry move-key-out` once (it prints the key and deletes it " +
  "from the database), keep the printed key in a secret file named by REGISTRY_SECRET_FILE (or in REGISTRY_SECRET; " +
  `in REGISTRY_SECRETS its id is "${DEFAULT_KEY_ID}"), and start again`;

export interface RegistryKeysOptions {
  /** config.registryKeys, newest first. */
  readonly configured: readonly { readonly id: string; readonly secret: string }[] | undefined;
  readonly db: Db;
  /** The embedded store's directory (db.dataDir); unset = in memory. */
  readonly dataDir: string | undefined;
}

const generate = () => randomBytes(32).toString("base64url");

/** The registry's keys, newest first; throws RegistryKeyError when start-up must stop. */
export async function loadRegistryKeys(options: RegistryKeysOptions): Promise<RegistryKey[]> {
  const { db } = options;
  if (!db.capabilities.embedded && (await keyInDatabase(db))) throw new RegistryKeyError(KEY_IN_DATABASE_MESSAGE);
  if (options.configured !== undefined && options.configured.length > 0) {
    return options.configured.map((k) => ({ id: k.id, secret: Buffer.from(k.secret, "utf8") }));
  }
  if (!db.capabilities.embedded) throw new RegistryKeyError(MISSING_KEY_MESSAGE);
  const secret = options.dataDir !== undefined ? await fromFile(options.dataDir) : generate();
  return [{ id: DEFAULT_KEY_ID, secret: Buffer.from(secret, "utf8") }];
}

export interface RegistrySecretOptions {
  /** A configured key (id "default"); unset = as loadRegistryKeys decides. */
  readonly secret: string | undefined;
  readonly db: Db;
  readonly dataDir: string | undefined;
}

/** The newest registry key alone (one-key setups and tests). */
export async function loadRegistrySecret(options: RegistrySecretOptions): Promise<Buffer> {
  const configured = options.secret !== undefined ? [{ id: DEFAULT_KEY_ID, secret: options.secret }] : undefined;
  const [newest] = await loadRegistryKeys({ configured, db: options.db, dataDir: options.dataDir });
  if (newest === undefined) throw new RegistryKeyError(MISSING_KEY_MESSAGE);
  return newest.secret;
}

async function keyInDatabase(db: Queryable): Promise<boolean> {
  const { rows } = await db.query<{ n: string }>("SELECT count(*)::text AS n FROM registry_secret");
  return rows[0]?.n !== "0";
}

/**
 * Deletes the key an earlier version kept in the database and answers it
 * (once: a second call answers undefined). The caller shows it to the
 * operator and nowhere else.
 */
export async function moveRegistryKeyOut(db: Db): Promise<string | undefined> {
  return db.transaction(async (tx) => {
    const { rows } = await tx.query<{ secret: string }>("DELETE FROM registry_secret RETURNING secret");
    return rows[0]?.secret;
  });
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

/** The cursor signing key (see above). */
export async function loadCursorSecret(db: Queryable, configured: string | undefined): Promise<string> {
  if (configured !== undefined && configured !== "") return configured;
  await db.query("INSERT INTO secrets (name, value) VALUES ('cursor', $1) ON CONFLICT (name) DO NOTHING", [
    randomBytes(32).toString("base64url"),
  ]);
  const { rows } = await db.query<{ value: string }>("SELECT value FROM secrets WHERE name = 'cursor'");
  const value = rows[0]?.value;
  if (value === undefined) throw new Error("cursor secret missing");
  return value;
}
