// LOG_FLUSH_MS (src/log.ts, stdoutDestination): log lines to stdout are
// gathered and written together, at most LOG_FLUSH_MS after they were made
// or once 8 KiB wait, and whatever waits is written as the process exits.
// Seen from outside, as an operator's log collector sees it: a child
// process logs to its real stdout and marks on stderr what it did when.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..");

// Logs one line, marks, logs 60 lines of about 240 bytes (past 8 KiB), marks, logs one more and exits at once.
const CHILD = `
import { createLogger, stdoutDestination } from "./src/log.ts";
const log = createLogger("info", stdoutDestination(Number(process.env.FLUSH_MS)));
const pause = (ms) => new Promise((r) => setTimeout(r, ms));
log.info({ n: 0 }, "first");
await pause(400);
process.stderr.write("mark-1\\n");
for (let n = 1; n <= 60; n++) log.info({ n, pad: "x".repeat(150) }, "bulk");
await pause(400);
process.stderr.write("mark-2\\n");
log.info({ n: 61 }, "last");
process.exit(0);
`;

interface Seen {
  /** What stdout had delivered when each stderr mark arrived, in lines. */
  readonly atMark: number[];
  readonly lines: { n: number; msg: string }[];
}

function runChild(flushMs: number): Promise<Seen> {
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", CHILD], {
    cwd: root,
    env: { PATH: process.env.PATH ?? "", FLUSH_MS: String(flushMs) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const atMark: number[] = [];
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr.on("data", (d: Buffer) => {
    for (const l of d.toString().split("\n")) if (l.startsWith("mark-")) atMark.push(out.split("\n").length - 1);
  });
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => {
      if (code !== 0) return reject(new Error(`child exited ${code}`));
      const lines = out
        .split("\n")
        .filter((l) => l !== "")
        .map((l) => JSON.parse(l) as { n: number; msg: string });
      resolve({ atMark, lines });
    });
  });
}

describe("LOG_FLUSH_MS", () => {
  it("gathers lines: none written before 8 KiB wait or the period ends, then in bulk, and the rest at exit", async () => {
    // A period far longer than the child lives: only the 8 KiB bound and the exit write anything.
    const seen = await runChild(60_000);
    expect(seen.atMark).toHaveLength(2);
    // 400 ms after the first line, it was still waiting.
    expect(seen.atMark[0]).toBe(0);
    // 60 lines of ~240 bytes passed 8 KiB: about 8 KiB of them were written without waiting for the period,
    // and the rest waited.
    expect(seen.atMark[1]).toBeGreaterThanOrEqual(30);
    expect(seen.atMark[1]).toBeLessThan(61);
    // Nothing lost: every line, in order, the last one written as the process exited.
    expect(seen.lines.map((l) => l.n)).toEqual(Array.from({ length: 62 }, (_, i) => i));
  }, 30_000);

  it("writes a lone line once the period has passed", async () => {
    const seen = await runChild(50);
    expect(seen.atMark[0]).toBe(1);
    expect(seen.atMark[1]).toBe(61);
    expect(seen.lines).toHaveLength(62);
  }, 30_000);

  it("with 0, writes each line as it is made", async () => {
    const seen = await runChild(0);
    expect(seen.atMark).toEqual([1, 61]);
    expect(seen.lines).toHaveLength(62);
  }, 30_000);
});
