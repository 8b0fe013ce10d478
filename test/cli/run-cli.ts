// Runs the built `resource-store` command (bin/resource-store.js -> dist/) as
// a child process, the way a user's shell does. Asynchronous on purpose: the
// service under test often lives in the test's own process.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { readdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));
export const BIN = fileURLToPath(new URL("../../bin/resource-store.js", import.meta.url));

export interface CliRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** What tsconfig.build.json compiles, and the files besides the sources that decide its output. */
const SOURCE_DIRS = ["src", "gen"];
const BUILD_SETTINGS = ["tsconfig.json", "tsconfig.build.json", "package.json", "node_modules/typescript/package.json"];
const EMITTED: Record<string, string> = { ".ts": ".js", ".tsx": ".js", ".mts": ".mjs", ".cts": ".cjs" };

/**
 * Whether dist/ already holds the build of the current sources: every source
 * file under src/ and gen/ has its compiled .js in dist/, written after the
 * source and after the build settings were last changed. A source edited,
 * checked out or generated since the build makes it stale.
 */
export async function cliBuildIsCurrent(): Promise<boolean> {
  const settings = await Promise.all(BUILD_SETTINGS.map((f) => stat(join(ROOT, f))));
  const settled = Math.max(...settings.map((s) => s.mtimeMs));
  for (const dir of SOURCE_DIRS) {
    for (const rel of await readdir(join(ROOT, dir), { recursive: true })) {
      const ext = Object.keys(EMITTED).find((e) => rel.endsWith(e) && !rel.endsWith(`.d${e}`));
      if (ext === undefined) continue;
      const source = await stat(join(ROOT, dir, rel)).catch(() => undefined);
      if (!source?.isFile()) continue;
      const built = await stat(join(ROOT, "dist", dir, rel.slice(0, -ext.length) + EMITTED[ext])).catch(
        () => undefined,
      );
      if (built === undefined || built.mtimeMs <= Math.max(source.mtimeMs, settled)) return false;
    }
  }
  return true;
}

/**
 * Compiles src/ into dist/ (what `npm run build` does), so the tests run the
 * command as shipped; skipped when dist/ is already current (CI builds once
 * before its test runs on two Node versions). A failed build takes away the
 * command's entry point, so that its output is never taken for current.
 */
export async function buildCli(): Promise<void> {
  if (await cliBuildIsCurrent()) return;
  try {
    await promisify(execFile)(
      process.execPath,
      [`${ROOT}node_modules/typescript/bin/tsc`, "-p", "tsconfig.build.json"],
      { cwd: ROOT },
    );
  } catch (err) {
    await rm(join(ROOT, "dist", "src", "cli", "main.js"), { force: true });
    throw err;
  }
}

/** The environment of a run: no RESOURCE_STORE_* leaking in from the developer's shell. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.RESOURCE_STORE_URL;
  delete env.RESOURCE_STORE_TOKEN;
  return { ...env, ...extra };
}

export function spawnCli(
  args: readonly string[],
  opts: { env?: Record<string, string>; nodeArgs?: string[] } = {},
): {
  child: ChildProcess;
  done: Promise<CliRun>;
} {
  const child = spawn(process.execPath, [...(opts.nodeArgs ?? []), BIN, ...args], {
    cwd: ROOT,
    env: cleanEnv(opts.env ?? {}),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const done = new Promise<CliRun>((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  return { child, done };
}

export function runCli(
  args: readonly string[],
  opts: { env?: Record<string, string>; nodeArgs?: string[] } = {},
): Promise<CliRun> {
  return spawnCli(args, opts).done;
}

/** Runs the command under a pseudo-terminal (util-linux `script`): stderr is a terminal there. */
export function runCliInTerminal(args: readonly string[], env: Record<string, string> = {}): Promise<CliRun> {
  const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  const command = [process.execPath, BIN, ...args].map(quote).join(" ");
  const child = spawn("script", ["-qfec", command, "/dev/null"], {
    cwd: ROOT,
    env: cleanEnv({ ...env, TERM: "xterm", COLUMNS: "160" }),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}
