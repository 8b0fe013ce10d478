// The real entry point (src/main.ts) as a child process, for the tests of
// the process as a whole (signals, start-up checks, its own memory). It runs
// on node itself with tsx as a loader, not through the tsx launcher (which
// forks), so the child's pid is the server's and signals reach it directly.
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { withRegistryKey } from "./registry-key.js";

const root = join(import.meta.dirname, "../..");

export interface MainProcess {
  readonly proc: ChildProcess;
  /** Every line written to stdout and stderr so far (the JSON log lines among them). */
  readonly lines: string[];
  /** The exit code, once it exits. */
  readonly exited: Promise<number | null>;
}

/**
 * Starts `src/main.ts` with only PATH and HOME from this process, PORT=0,
 * LOG_LEVEL=info and `env` on top (with the tests' registry key when `env`
 * names a PostgreSQL database and no key).
 */
export function startMain(env: Record<string, string>): MainProcess {
  const proc = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    cwd: root,
    env: withRegistryKey({
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? "",
      PORT: "0",
      LOG_LEVEL: "info",
      ...env,
    }),
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  for (const s of [proc.stdout, proc.stderr]) {
    let buf = "";
    s?.on("data", (d: Buffer) => {
      buf += d.toString();
      const parts = buf.split("\n");
      buf = parts.pop() ?? "";
      lines.push(...parts);
    });
  }
  const exited = new Promise<number | null>((resolve) => proc.once("exit", (code) => resolve(code)));
  return { proc, lines, exited };
}

/** The port from the child's "listening" log line (or another line with a port: `message`); fails if it exits first or logs none within `ms`. */
export async function listeningPort(child: MainProcess, ms = 60_000, message = "listening"): Promise<number> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    for (const l of child.lines) {
      try {
        const j = JSON.parse(l) as { msg?: string; port?: number };
        if (j.msg === message && typeof j.port === "number") return j.port;
      } catch {
        // not JSON
      }
    }
    if (child.proc.exitCode !== null) throw new Error(`exited early: ${child.lines.join("\n")}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`never logged "${message}" within ${ms} ms: ${child.lines.join("\n")}`);
}
