// `resource-store dump -o FILE` and `resource-store restore FILE` (issue 34):
// the whole history of a store into one file and back. Like the `registry`
// tools they open the database themselves — DATABASE_URL, else the embedded
// store under DATA_DIR (stopped: PGlite is one process's) — because the API
// cannot write history with given stamps (docs/dump-format.md says why).
import { createReadStream } from "node:fs";
import { open, rm, stat } from "node:fs/promises";
import { Command, Option } from "commander";
import { loadConfig } from "../config.js";
import { DumpError, migrate, openDatabase, restoreDump, writeDump, type Db } from "../store/index.js";
import { createProgress } from "./progress.js";

type Env = Readonly<Record<string, string | undefined>>;

export interface DumpCommandIo {
  readonly env?: Env;
  /** The summary line (default process.stdout). */
  readonly stdout?: (text: string) => void;
  /** Errors (default process.stderr). */
  readonly stderr?: (text: string) => void;
}

async function withStore<T>(env: Env, fn: (db: Db) => Promise<T>): Promise<T> {
  const config = loadConfig(env);
  const db = await openDatabase(config.databaseUrl !== undefined ? { databaseUrl: config.databaseUrl, poolSize: 2 } : { dataDir: config.dataDir });
  try {
    await migrate(db);
    return await fn(db);
  } finally {
    await db.close();
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

export async function runDump(env: Env, file: string, opts: { since?: string; quiet: boolean }): Promise<string> {
  return withStore(env, async (db) => {
    const progress = createProgress("dump", { quiet: opts.quiet });
    // Created (never overwritten) before anything is written: a failure below removes only a file this run made.
    const out = (await open(file, "wx")).createWriteStream();
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

export async function runRestore(env: Env, file: string, opts: { quiet: boolean }): Promise<string> {
  const size = (await stat(file)).size;
  return withStore(env, async (db) => {
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
    .description("write the whole store (every version, tombstones, registry hashes and key fingerprints) to one file; opens DATABASE_URL, else DATA_DIR (stop the service first)")
    .requiredOption("-o, --output <file>", "the dump file to create (.rsdump.gz); never overwritten")
    .addOption(new Option("--since <stamp>", "only what changed after this stamp: the `until` of an earlier dump"))
    .action(async (opts: { output: string; since?: string }, cmd: Command) => {
      try {
        out(`${await runDump(env, opts.output, { ...(opts.since !== undefined ? { since: opts.since } : {}), quiet: quiet(cmd) })}\n`);
      } catch (e) {
        fail(e);
      }
    });
  dump.addHelpText("after", "\nExamples:\n  $ DATA_DIR=./data resource-store dump -o store.rsdump.gz\n  $ DATABASE_URL=postgres://db/rs resource-store dump --since 2026-11-26T15:06:20.000001Z -o day.rsdump.gz\n");

  const restore = new Command("restore")
    .description("load a dump into an empty store (or an incremental dump into the store it follows), keeping every stamp, version and actor")
    .argument("<file>", "the dump file")
    .action(async (file: string, _opts: unknown, cmd: Command) => {
      try {
        out(`${await runRestore(env, file, { quiet: quiet(cmd) })}\n`);
      } catch (e) {
        fail(e);
      }
    });
  restore.addHelpText("after", "\nExample:\n  $ DATABASE_URL=postgres://db/rs resource-store restore store.rsdump.gz\n");
  return [dump, restore];
}

export const dumpCommand = (io: DumpCommandIo = {}): Command => dumpCommands(io)[0]!;
export const restoreCommand = (io: DumpCommandIo = {}): Command => dumpCommands(io)[1]!;
