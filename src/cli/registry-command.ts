// `resource-store registry ...`: operator tools for the registry's keys
// (docs/contract/06-registry.md). They open the database from DATABASE_URL and take the
// keys from REGISTRY_SECRET(S) or REGISTRY_SECRET(S)_FILE, as the service
// does, and run the same start-up check of the keys first. Output is counts
// and key ids only; the one exception is move-key-out, whose whole purpose is
// to show the operator the key once.
import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";
import { Command, InvalidArgumentError } from "commander";
import { loadConfig } from "../config.js";
import {
  loadRegistryKeys,
  migrate,
  MOVED_KEY_GUIDANCE,
  moveRegistryKeyOut,
  openDatabase,
  rederiveRegistry,
  registryKeyStatus,
  rehashRegistry,
  type Db,
  type RegisteredUid,
} from "../store/index.js";

export interface RegistryCommandIo {
  /** The environment the tools read (default process.env). */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Summary lines and, for move-key-out, the key; resolves once written out (default process.stdout, awaiting the write). */
  readonly stdout?: (text: string) => void | Promise<void>;
  /** Progress and guidance (default process.stderr). */
  readonly stderr?: (text: string) => void;
}

type Env = Readonly<Record<string, string | undefined>>;

async function withDatabase<T>(
  env: Env,
  fn: (db: Db, config: ReturnType<typeof loadConfig>) => Promise<T>,
): Promise<T> {
  const config = loadConfig(env);
  if (config.databaseUrl === undefined)
    throw new Error("DATABASE_URL is not set: these tools work on the service's PostgreSQL database");
  const db = await openDatabase({ databaseUrl: config.databaseUrl, poolSize: 2 });
  try {
    await migrate(db);
    return await fn(db, config);
  } finally {
    await db.close();
  }
}

/** Wraps every registry row in the first listed key; answers the summary line. */
export async function runRehash(
  env: Env,
  options: { batchSize: number; progress?: (line: string) => void },
): Promise<string> {
  return withDatabase(env, async (db, config) => {
    const keys = await loadRegistryKeys({ configured: config.registryKeys, db, dataDir: undefined });
    const first = keys[0]?.id ?? "";
    const done = await rehashRegistry(db, keys, {
      batchSize: options.batchSize,
      onBatch: ({ table, rows }) => options.progress?.(`${table}: ${rows} rows wrapped in key ${first}`),
    });
    return `rehashed ${done.patients} patients and ${done.studies} studies to key ${first}`;
  });
}

/** NDJSON of register bodies: {"datasource_id", "external_uid"} or {"patient_identifier", "external_uid"}. */
async function* uidsFrom(file: string): AsyncGenerator<RegisteredUid> {
  const lines = createInterface({ input: createReadStream(file, { encoding: "utf8" }), crlfDelay: Infinity });
  let n = 0;
  for await (const line of lines) {
    n += 1;
    if (line.trim() === "") continue;
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch {
      throw new Error(`line ${n} is not JSON`);
    }
    // Never quote the line: it holds a uid.
    const o = (typeof v === "object" && v !== null ? v : {}) as Record<string, unknown>;
    const uid = o.external_uid;
    if (typeof uid === "string" && typeof o.datasource_id === "string")
      yield { datasourceId: o.datasource_id, externalUid: uid };
    else if (typeof uid === "string" && typeof o.patient_identifier === "string")
      yield { patientIdentifier: o.patient_identifier, externalUid: uid };
    else
      throw new Error(`line ${n} is not {"datasource_id", "external_uid"} nor {"patient_identifier", "external_uid"}`);
  }
}

/** Re-hashes the rows of the uids in FILE from the uids, under the first listed key alone; answers the summary line. */
export async function runRederive(
  env: Env,
  file: string,
  options: { batchSize: number; progress?: (line: string) => void },
): Promise<string> {
  return withDatabase(env, async (db, config) => {
    const keys = await loadRegistryKeys({ configured: config.registryKeys, db, dataDir: undefined });
    const first = keys[0]?.id ?? "";
    const done = await rederiveRegistry(db, keys, uidsFrom(file), {
      batchSize: options.batchSize,
      onBatch: ({ table, rows }) => options.progress?.(`${table}: ${rows} rows re-derived under key ${first}`),
    });
    return (
      `re-derived ${done.patients} patients and ${done.studies} studies under key ${first}` +
      ` (${done.unchanged} already under it alone, ${done.notFound} not registered)`
    );
  });
}

/** One line per key id: listed or not, fingerprint, rows depending on it. */
async function runKeys(env: Env): Promise<string[]> {
  return withDatabase(env, async (db, config) => {
    const keys = await loadRegistryKeys({ configured: config.registryKeys, db, dataDir: undefined });
    return (await registryKeyStatus(db, keys)).map(
      (k) =>
        `${k.id}\t${k.configured ? (k.hashesNewRows ? "listed, hashes new rows" : "listed") : "not listed"}` +
        `\tfingerprint ${k.fingerprint}\t${k.rows} rows depend on it${k.rows === 0 && !k.hashesNewRows ? " (can be dropped)" : ""}`,
    );
  });
}

/** Shows the key kept in the database through `show`, then deletes it; false when there is none. */
export async function runMoveKeyOut(env: Env, show: (key: string) => Promise<void>): Promise<boolean> {
  return withDatabase(env, (db) => moveRegistryKeyOut(db, show));
}

/** Resolves once the text is handed to the operating system; rejects when it cannot be (a closed pipe). */
function writeOut(text: string): Promise<void> {
  return new Promise((resolve, reject) => {
    process.stdout.write(text, (err) => (err ? reject(err) : resolve()));
  });
}

function positiveInt(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 1_000_000) {
    throw new InvalidArgumentError("a whole number from 1 to 1000000");
  }
  return Number(value);
}

export function registryCommand(io: RegistryCommandIo = {}): Command {
  const env = io.env ?? process.env;
  const out = io.stdout ?? writeOut;
  const err = io.stderr ?? ((t: string) => void process.stderr.write(t));
  const registry = new Command("registry").description("operator tools for the patient/study registry's keys");

  registry
    .command("keys")
    .description("list every key id the configuration or the store knows, and how many rows depend on each")
    .action(async () => {
      for (const line of await runKeys(env)) await out(`${line}\n`);
    });

  registry
    .command("rehash")
    .description(
      "wrap every registry row's hash in the first listed key, online, in batches (an older key stays needed); " +
        "with --uids FILE, re-hash the rows of those uids from the uids under the first key alone (which frees older keys)",
    )
    .option("--batch-size <n>", "rows per transaction", positiveInt, 1000)
    .option(
      "--uids <file>",
      'NDJSON, one {"datasource_id","external_uid"} or {"patient_identifier","external_uid"} a line',
    )
    .action(async (opts: { batchSize: number; uids?: string }) => {
      const progress = (line: string) => err(`${line}\n`);
      const summary =
        opts.uids !== undefined
          ? await runRederive(env, opts.uids, { batchSize: opts.batchSize, progress })
          : await runRehash(env, { batchSize: opts.batchSize, progress });
      await out(`${summary}\n`);
    });

  registry
    .command("move-key-out")
    .description("print the registry key an earlier version kept in the database, once, then delete it from there")
    .action(async () => {
      const moved = await runMoveKeyOut(env, async (key) => {
        err(`${MOVED_KEY_GUIDANCE}\n`);
        // Written out before the delete: if this fails, the key stays where it was.
        await out(`${key}\n`);
      });
      if (!moved) await out("no registry key in the database: nothing to move\n");
    });

  return registry;
}
