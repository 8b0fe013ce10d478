// The service under test runs as `npm start` does (the compiled
// dist/src/main.js; `npm run bench` builds it first) in a child
// process of its own, so the benchmark's client and the server do not share
// an event loop, and the server's memory can be read from /proc.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { onStop } from "./on-stop.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

export interface BenchServer {
  readonly url: string;
  readonly pid: number;
  /** Resident memory now and its high-water mark, in bytes (Linux /proc). */
  memory(): Promise<{ rss: number; peak: number }>;
  close(): Promise<void>;
}

export interface ServerOptions {
  /** PostgreSQL URL; unset = the embedded PGlite under dataDir. */
  readonly databaseUrl?: string;
  /** Where PGlite and s3rver keep their files; a fresh temporary folder when unset. */
  readonly dataDir?: string;
  readonly env?: Record<string, string>;
  /** Run the server in this many node:cluster workers on one port (bench/support/cluster.mjs); unset = one process. */
  readonly workers?: number;
  /** A script (from the repository's root) to run instead of the service, which says "listening" as it does: the load benchmark's floor. */
  readonly entry?: string;
}

/**
 * The servers this process started and has not stopped. A benchmark stopped
 * from outside (Ctrl-C, kill) takes them with it: a server left running
 * kept a core busy and skewed every later measurement on the machine.
 */
const running = new Set<ChildProcess>();
function killRunning(): void {
  for (const child of running) child.kill("SIGKILL");
  running.clear();
}
process.once("exit", killRunning);
onStop(killRunning);

export async function startServer(opts: ServerOptions = {}): Promise<BenchServer> {
  const ownDir = opts.dataDir === undefined ? await mkdtemp(join(tmpdir(), "rs-bench-")) : undefined;
  const dataDir = opts.dataDir ?? ownDir ?? "";
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    PORT: "0",
    HOST: "127.0.0.1",
    DATA_DIR: dataDir,
    LOG_LEVEL: "info",
    ...(opts.databaseUrl !== undefined ? { DATABASE_URL: opts.databaseUrl } : {}),
    ...opts.env,
  };
  if (opts.databaseUrl === undefined) delete env.DATABASE_URL;
  // On PostgreSQL the registry key must be given (it never lives in the database): one per benchmark server.
  else if (
    !["REGISTRY_SECRET", "REGISTRY_SECRET_FILE", "REGISTRY_SECRETS", "REGISTRY_SECRETS_FILE"].some(
      (k) => env[k] !== undefined,
    )
  ) {
    env.REGISTRY_SECRET = randomBytes(32).toString("base64url");
  }
  // BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" profiles the server.
  const nodeArgs = (process.env.BENCH_SERVER_NODE_ARGS ?? "").split(" ").filter((a) => a !== "");
  const entry = join(
    ROOT,
    opts.entry ?? (opts.workers === undefined ? "dist/src/main.js" : "bench/support/cluster.mjs"),
  );
  if (opts.workers !== undefined) env.BENCH_WORKERS = String(opts.workers);
  const child = spawn(process.execPath, [...nodeArgs, entry], {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  running.add(child);
  child.once("exit", () => running.delete(child));
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const port = await new Promise<number>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    let found = false;
    // Under the cluster harness every worker says "listening" (on the same port): wait for all of them.
    let waiting = opts.workers ?? 1;
    lines.on("line", (line) => {
      if (found) return; // keep draining the per-call log so the pipe never blocks the server
      try {
        const entry = JSON.parse(line) as { msg?: string; port?: number };
        if (entry.msg === "listening" && typeof entry.port === "number" && --waiting === 0) {
          found = true;
          resolve(entry.port);
        }
      } catch {
        // not a log line
      }
    });
    child.once("exit", (code) => reject(new Error(`server exited with ${String(code)} before listening: ${stderr}`)));
  });
  const pid = child.pid!;
  return {
    url: `http://127.0.0.1:${port}`,
    pid,
    memory: () => processMemory(pid),
    async close() {
      await stop(child);
      if (ownDir !== undefined) await rm(ownDir, { recursive: true, force: true });
    },
  };
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  await exited;
  clearTimeout(timer);
}

/** VmRSS and VmHWM of a process, in bytes. */
export async function processMemory(pid: number): Promise<{ rss: number; peak: number }> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN) * 1024;
  return { rss: kb("VmRSS"), peak: kb("VmHWM") };
}

/** CPU time (user + system) a process has used so far, in ms (Linux /proc; 10 ms ticks). */
export async function processCpuMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}
