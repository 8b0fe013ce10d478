// Runs the built `resource-store` command (bin/resource-store.js -> dist/) as
// a child process, the way a user's shell does. Asynchronous on purpose: the
// service under test often lives in the test's own process.
import { execFile, spawn, type ChildProcess } from "node:child_process";
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

/** Compiles src/ into dist/ (what `npm run build` does), so the tests run the command as shipped. */
export async function buildCli(): Promise<void> {
  await promisify(execFile)(process.execPath, [`${ROOT}node_modules/typescript/bin/tsc`, "-p", "tsconfig.build.json"], { cwd: ROOT });
}

/** The environment of a run: no RESOURCE_STORE_* leaking in from the developer's shell. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.RESOURCE_STORE_URL;
  delete env.RESOURCE_STORE_TOKEN;
  return { ...env, ...extra };
}

export function spawnCli(args: readonly string[], opts: { env?: Record<string, string>; nodeArgs?: string[] } = {}): {
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

export function runCli(args: readonly string[], opts: { env?: Record<string, string>; nodeArgs?: string[] } = {}): Promise<CliRun> {
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
