// The registry's HMAC key. REGISTRY_SECRET wins. Without it:
// - PostgreSQL: a generated key kept in the database (registry_secret), so
//   every service process on that database hashes alike; the first process
//   to start inserts it, the others find it.
// - PGlite with a data directory: a generated key in `${dataDir}/registry-secret`
//   (mode 0600), beside the database but outside it, so a copy of the data
//   files alone does not carry the key.
// - PGlite in memory: a key for this process only, like its data.
import { randomBytes } from "node:crypto";
import { link, mkdir, readFile, unlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Db } from "./store/db.js";

export const REGISTRY_SECRET_FILE = "registry-secret";

export interface RegistrySecretOptions {
  /** config.registrySecret */
  readonly secret: string | undefined;
  readonly db: Db;
  /** config.dataDir; unset = an in-memory embedded store. */
  readonly dataDir: string | undefined;
}

const generate = () => randomBytes(32).toString("base64url");

export async function loadRegistrySecret(options: RegistrySecretOptions): Promise<Buffer> {
  if (options.secret !== undefined) return Buffer.from(options.secret, "utf8");
  if (options.db.kind === "postgres") return Buffer.from(await fromDatabase(options.db), "utf8");
  if (options.dataDir !== undefined) return Buffer.from(await fromFile(options.dataDir), "utf8");
  return Buffer.from(generate(), "utf8");
}

async function fromDatabase(db: Db): Promise<string> {
  // Two statements: after losing the insert race, a fresh snapshot sees the winner's row.
  await db.query("INSERT INTO registry_secret (id, secret) VALUES (true, $1) ON CONFLICT DO NOTHING", [generate()]);
  const { rows } = await db.query<{ secret: string }>("SELECT secret FROM registry_secret");
  const secret = rows[0]?.secret;
  if (secret === undefined) throw new Error("registry secret missing after insert");
  return secret;
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
