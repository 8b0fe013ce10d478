// `resource-store registry ...`: operator tools for the registry's key
// (issue 20). They open the database from DATABASE_URL and take the keys
// from REGISTRY_SECRET, REGISTRY_SECRET_FILE or REGISTRY_SECRETS, as the
// service does. Output is counts and key ids only; the one exception is
// move-key-out, whose whole purpose is to show the operator the key once.
import { Command, InvalidArgumentError } from "commander";
import { loadConfig } from "../config.js";
import { loadRegistryKeys, migrate, moveRegistryKeyOut, openDatabase, rehashRegistry, type Db } from "../store/index.js";

export interface RegistryCommandIo {
  /** The environment the tools read (default process.env). */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Summary lines and, for move-key-out, the key (default process.stdout). */
  readonly stdout?: (text: string) => void;
  /** Progress and guidance (default process.stderr). */
  readonly stderr?: (text: string) => void;
}

type Env = Readonly<Record<string, string | undefined>>;

async function withDatabase<T>(env: Env, fn: (db: Db, config: ReturnType<typeof loadConfig>) => Promise<T>): Promise<T> {
  const config = loadConfig(env);
  if (config.databaseUrl === undefined) throw new Error("DATABASE_URL is not set: these tools work on the service's PostgreSQL database");
  const db = await openDatabase({ databaseUrl: config.databaseUrl, poolSize: 2 });
  try {
    await migrate(db);
    return await fn(db, config);
  } finally {
    await db.close();
  }
}

/** Re-hashes every registry row to the newest key; answers the summary line. */
export async function runRehash(env: Env, options: { batchSize: number; progress?: (line: string) => void }): Promise<string> {
  return withDatabase(env, async (db, config) => {
    const keys = await loadRegistryKeys({ configured: config.registryKeys, db, dataDir: undefined });
    const newest = keys[0]?.id ?? "";
    const done = await rehashRegistry(db, keys, {
      batchSize: options.batchSize,
      onBatch: ({ table, rows }) => options.progress?.(`${table}: ${rows} rows moved to key ${newest}`),
    });
    return `rehashed ${done.patients} patients and ${done.studies} studies to key ${newest}`;
  });
}

/** Deletes the key kept in the database; answers it (once), or undefined when there is none. */
export async function runMoveKeyOut(env: Env): Promise<string | undefined> {
  return withDatabase(env, (db) => moveRegistryKeyOut(db));
}

function positiveInt(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 1_000_000) {
    throw new InvalidArgumentError("a whole number from 1 to 1000000");
  }
  return Number(value);
}

export function registryCommand(io: RegistryCommandIo = {}): Command {
  const env = io.env ?? process.env;
  const out = io.stdout ?? ((t: string) => void process.stdout.write(t));
  const err = io.stderr ?? ((t: string) => void process.stderr.write(t));
  const registry = new Command("registry").description("operator tools for the patient/study registry's key");

  registry
    .command("rehash")
    .description("re-hash every registry row to the newest key of REGISTRY_SECRETS, online, in batches")
    .option("--batch-size <n>", "rows per transaction", positiveInt, 1000)
    .action(async (opts: { batchSize: number }) => {
      const summary = await runRehash(env, { batchSize: opts.batchSize, progress: (line) => err(`${line}\n`) });
      out(`${summary}\n`);
    });

  registry
    .command("move-key-out")
    .description("print the registry key an earlier version kept in the database, once, and delete it from there")
    .action(async () => {
      const key = await runMoveKeyOut(env);
      if (key === undefined) {
        out("no registry key in the database: nothing to move\n");
        return;
      }
      err(
        "The registry key below was deleted from the database. Keep it now in a secret file named by " +
          'REGISTRY_SECRET_FILE (or in REGISTRY_SECRET; in REGISTRY_SECRETS its id is "default"): it is not shown again.\n',
      );
      out(`${key}\n`);
    });

  return registry;
}
