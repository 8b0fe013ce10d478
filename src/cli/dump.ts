// `resource-store dump -o FILE` and `resource-store restore FILE` (docs/dump-format.md):
// the whole history of a store into one file and back. Like the `registry`
// tools they open the database themselves — DATABASE_URL, else the embedded
// store under DATA_DIR (stopped: PGlite is one process's) — because the API
// cannot write history with given stamps (docs/dump-format.md says why).
// `--url URL dump` is the online backup (docs/operations.md): the service's
// AdminService.Dump writes the same file while it runs; restore is offline
// only.
import { createReadStream, type WriteStream } from "node:fs";
import { open, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { Command, Option } from "commander";
import { createResourceStoreClientV1 } from "../client/index.js";
import { loadConfig } from "../config.js";
import {
  checkSince,
  DumpError,
  migrate,
  openDatabase,
  restoreDump,
  secureDataDir,
  writeDump,
  type Db,
} from "../store/index.js";
import { describeError, resolveGlobals, type RawGlobals } from "./common.js";
import { createProgress } from "./progress.js";

type Env = Readonly<Record<string, string | undefined>>;

export interface DumpCommandIo {
  readonly env?: Env;
  /** The summary line (default process.stdout). */
  readonly stdout?: (text: string) => void;
  /** Errors (default process.stderr). */
  readonly stderr?: (text: string) => void;
}

/** What tells a DATA_DIR that holds an embedded store: PGlite's version file. */
async function holdsStore(dataDir: string): Promise<boolean> {
  return stat(join(dataDir, "pglite", "PG_VERSION")).then(
    (s) => s.isFile(),
    () => false,
  );
}

/**
 * Opens the store an offline command works on. `existing`: the command reads
 * a store, so a DATA_DIR without one is refused, never created (a
 * dump from the wrong directory made an empty store and "dumped 0
 * versions"). An embedded store another process holds is refused by
 * openDatabase (src/store/pglite.ts).
 */
async function withStore<T>(env: Env, existing: boolean, fn: (db: Db) => Promise<T>): Promise<T> {
  const config = loadConfig(env);
  if (config.databaseUrl === undefined) {
    if (existing && !(await holdsStore(config.dataDir))) {
      throw new DumpError(
        `DATA_DIR ${config.dataDir} holds no store (no pglite/ in it): nothing to dump. ` +
          "Set DATA_DIR to the service's data directory, or DATABASE_URL for PostgreSQL; to back up a running service, give --url",
      );
    }
    // What this command writes there is owner-only too (src/store/data-dir.ts).
    await secureDataDir(config.dataDir);
  }
  const db = await openDatabase(
    config.databaseUrl !== undefined ? { databaseUrl: config.databaseUrl, poolSize: 2 } : { dataDir: config.dataDir },
  );
  try {
    await migrate(db);
    return await fn(db);
  } finally {
    await db.close();
  }
}

/**
 * The output file, created owner-only (it holds the whole store) and never
 * over an existing one: a failure later removes only a file this run made.
 */
async function createOutput(file: string): Promise<WriteStream> {
  try {
    return (await open(file, "wx", 0o600)).createWriteStream();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EEXIST")
      throw new DumpError(`${file} exists: a dump never overwrites a file; give a new name, or remove it first`);
    if (code === "ENOENT") throw new DumpError(`${file}: its directory does not exist`);
    throw err;
  }
}

/**
 * The operator's reason: a DumpError's message, possibly wrapped by the
 * store's error mapping ("internal error" around it), else the innermost
 * cause's (a file system or database error says more than its wrapper).
 */
export function describeDumpError(err: unknown): string {
  let innermost: unknown = err;
  for (let e: unknown = err; e instanceof Error; e = (e as { cause?: unknown }).cause) {
    if (e instanceof DumpError) return e.message;
    innermost = e;
  }
  return innermost instanceof Error ? innermost.message : String(innermost);
}

/** The options of the program (--url, --token...) that only an online dump uses. */
type OnlineGlobals = Pick<RawGlobals, "url" | "token" | "tokenFile"> & { quiet?: boolean };

/**
 * The online dump: AdminService.Dump over gRPC (admin scope), its chunks
 * written to `file` as they come. The service reads the dump in one
 * snapshot; the file is the same as an offline dump of that instant.
 */
async function runOnlineDump(raw: OnlineGlobals, env: Env, file: string, opts: { since?: string }): Promise<string> {
  const g = resolveGlobals(raw, env);
  if (opts.since !== undefined) checkSince(opts.since);
  const client = createResourceStoreClientV1({
    baseUrl: g.url,
    transport: "grpc",
    ...(g.token !== undefined ? { token: g.token } : {}),
  });
  const out = await createOutput(file);
  try {
    for await (const chunk of client.admin.dump(opts.since !== undefined ? { since: opts.since } : {})) {
      if (!out.write(chunk.data)) await new Promise<void>((r) => out.once("drain", () => r()));
    }
    await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
  } catch (e) {
    out.destroy();
    await rm(file, { force: true });
    throw new DumpError(`the online dump from ${g.url} failed: ${describeError(e, g.url)}; no file was left`);
  }
  const { versions, until } = await summaryOf(file);
  return `dumped ${versions} versions (until ${until || "the empty store"}) from ${g.url}`;
}

/** The versions and `until` a dump file holds, from its header and trailer. */
async function summaryOf(file: string): Promise<{ versions: number; until: string }> {
  const { createGunzip } = await import("node:zlib");
  const { createInterface } = await import("node:readline");
  let until = "";
  let versions = 0;
  let first = true;
  for await (const line of createInterface({
    input: createReadStream(file).pipe(createGunzip()),
    crlfDelay: Infinity,
  })) {
    if (first) {
      until = (JSON.parse(line) as { until?: string | null }).until ?? "";
      first = false;
    } else if (line.startsWith('{"record":"trailer"')) {
      versions = (JSON.parse(line) as { counts?: { version?: number } }).counts?.version ?? 0;
    }
  }
  return { versions, until };
}

async function runDump(env: Env, file: string, opts: { since?: string; quiet: boolean }): Promise<string> {
  // Before anything is opened: a bad --since never reaches the database (nor the header).
  if (opts.since !== undefined) checkSince(opts.since);
  return withStore(env, true, async (db) => {
    const progress = createProgress("dump", { quiet: opts.quiet });
    // Created (never overwritten) before anything is written: a failure below removes only a file this run made.
    const out = await createOutput(file);
    try {
      const summary = await writeDump(db, out, {
        ...(opts.since !== undefined ? { since: opts.since } : {}),
        serviceVersion: "0.1.0",
        onVersions: (n) => progress.update({ done: n, rows: n, bytes: out.bytesWritten }),
      });
      return `dumped ${summary.versions} versions (until ${summary.until || "the empty store"})`;
    } catch (e) {
      // A file without its trailer would be refused by restore anyway; do not leave it looking like a dump.
      out.destroy();
      await rm(file, { force: true });
      throw e;
    } finally {
      progress.stop();
    }
  });
}

async function runRestore(env: Env, file: string, opts: { quiet: boolean }): Promise<string> {
  const size = (
    await stat(file).catch((err: NodeJS.ErrnoException) => {
      throw err.code === "ENOENT" ? new DumpError(`${file} does not exist`) : err;
    })
  ).size;
  return withStore(env, false, async (db) => {
    const progress = createProgress("restore", { quiet: opts.quiet });
    try {
      const summary = await restoreDump(db, createReadStream(file), {
        onProgress: (versions, bytes) => progress.update({ done: bytes, total: size, rows: versions, bytes }),
      });
      return `restored ${summary.versions} versions${summary.since !== null ? ` (after ${summary.since})` : ""}`;
    } finally {
      progress.stop();
    }
  });
}

export function dumpCommands(io: DumpCommandIo = {}): Command[] {
  const env = io.env ?? process.env;
  const out = io.stdout ?? ((t: string) => void process.stdout.write(t));
  const err = io.stderr ?? ((t: string) => void process.stderr.write(t));
  const fail = (e: unknown): void => {
    err(`error: ${describeDumpError(e)}\n`);
    process.exitCode = 1;
  };
  const quiet = (cmd: Command): boolean => cmd.optsWithGlobals<{ quiet?: boolean }>().quiet === true;

  const dump = new Command("dump")
    .description(
      "write the whole store (every version, tombstones, registry hashes and key fingerprints) to one file: offline from DATABASE_URL, else DATA_DIR (the embedded store stopped); online from a running service with --url (admin token)",
    )
    .requiredOption("-o, --output <file>", "the dump file to create (.rsdump.gz, mode 0600); never overwritten")
    .addOption(
      new Option(
        "--since <stamp>",
        "only what changed after this stamp: the `until` of an earlier dump (RFC 3339 with Z or an offset)",
      ),
    )
    .action(async (opts: { output: string; since?: string }, cmd: Command) => {
      try {
        const globals = cmd.optsWithGlobals<OnlineGlobals>();
        const since = opts.since !== undefined ? { since: opts.since } : {};
        if (globals.url !== undefined) {
          out(`${await runOnlineDump(globals, env, opts.output, since)}\n`);
          return;
        }
        if (globals.token !== undefined || globals.tokenFile !== undefined) {
          throw new DumpError(
            "--token and --token-file are for an online dump: give --url too (an offline dump opens DATABASE_URL or DATA_DIR and needs no token)",
          );
        }
        out(`${await runDump(env, opts.output, { ...since, quiet: quiet(cmd) })}\n`);
      } catch (e) {
        fail(e);
      }
    });
  dump.addHelpText(
    "after",
    "\nExamples:\n  $ DATA_DIR=./data resource-store dump -o store.rsdump.gz\n  $ DATABASE_URL=postgres://db/rs resource-store dump --since 2026-11-26T15:06:20.000001Z -o day.rsdump.gz\n  $ resource-store --url http://rs:8080 --token-file admin.token dump -o store.rsdump.gz\n",
  );

  const restore = new Command("restore")
    .description(
      "load a dump into an empty store (or an incremental dump into the store it follows), keeping every stamp, version and actor",
    )
    .argument("<file>", "the dump file")
    .action(async (file: string, _opts: unknown, cmd: Command) => {
      try {
        if (cmd.optsWithGlobals<OnlineGlobals>().url !== undefined) {
          throw new DumpError(
            "restore works offline only: it writes the history with its own stamps, which the API cannot. Stop the service and run restore with DATABASE_URL or DATA_DIR (no --url)",
          );
        }
        out(`${await runRestore(env, file, { quiet: quiet(cmd) })}\n`);
      } catch (e) {
        fail(e);
      }
    });
  restore.addHelpText(
    "after",
    "\nExample:\n  $ DATABASE_URL=postgres://db/rs resource-store restore store.rsdump.gz\n",
  );
  return [dump, restore];
}

export const dumpCommand = (io: DumpCommandIo = {}): Command => dumpCommands(io)[0]!;
export const restoreCommand = (io: DumpCommandIo = {}): Command => dumpCommands(io)[1]!;
