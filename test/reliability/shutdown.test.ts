// The real entry point as a child process: SIGTERM lets an in-flight call
// finish (its body is still arriving when the signal comes) and the process
// exits 0. Start-up refuses a non-loopback HOST without authentication.
import { spawn, type ChildProcess } from "node:child_process";
import http from "node:http";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "../..");
const tsx = join(root, "node_modules/.bin/tsx");
let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "rs-main-"));
});
afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

interface Child {
  proc: ChildProcess;
  lines: string[];
  exited: Promise<number | null>;
}

function startMain(env: Record<string, string>): Child {
  const proc = spawn(tsx, ["src/main.ts"], {
    cwd: root,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", DATA_DIR: dataDir, PORT: "0", LOG_LEVEL: "info", ...env },
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

async function listeningPort(child: Child, ms = 60_000): Promise<number> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    for (const l of child.lines) {
      try {
        const j = JSON.parse(l) as { msg?: string; port?: number };
        if (j.msg === "listening" && typeof j.port === "number") return j.port;
      } catch {
        // not JSON
      }
    }
    if (child.proc.exitCode !== null) throw new Error(`exited early: ${child.lines.join("\n")}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("never listened");
}

describe("the process", () => {
  it("drains an in-flight call on SIGTERM and exits 0", async () => {
    const child = startMain({});
    try {
      const port = await listeningPort(child);
      const body = JSON.stringify({ resources: [{ identifier: "drained", payload_type: "annotation", label: "slow" }] });
      const half = Math.floor(body.length / 2);
      const answer = new Promise<{ status: number; text: string }>((resolve, reject) => {
        const req = http.request({ port, host: "127.0.0.1", method: "POST", path: "/resources/create", headers: { "content-type": "application/json" } }, (res) => {
          let text = "";
          res.on("data", (d: Buffer) => (text += d.toString()));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
        });
        req.on("error", reject);
        req.write(body.slice(0, half));
        // The rest arrives after the signal.
        setTimeout(() => {
          child.proc.kill("SIGTERM");
          setTimeout(() => req.end(body.slice(half)), 500);
        }, 500);
      });
      const res = await answer;
      expect(res).toEqual({ status: 200, text: JSON.stringify({ created: 1 }) });
      expect(await child.exited).toBe(0);
      expect(child.lines.some((l) => l.includes("draining"))).toBe(true);
    } finally {
      child.proc.kill("SIGKILL");
    }
  }, 90_000);

  it("refuses to listen beyond loopback without authentication, naming HOST", async () => {
    const child = startMain({ HOST: "0.0.0.0" });
    const code = await child.exited;
    expect(code).not.toBe(0);
    expect(child.lines.join("\n")).toMatch(/HOST.*authentication is off/);
  }, 60_000);

  it("listens beyond loopback once tokens are configured", async () => {
    const child = startMain({ HOST: "0.0.0.0", API_TOKENS: "t0ken-for-test=read" });
    try {
      const port = await listeningPort(child);
      const res = await fetch(`http://127.0.0.1:${port}/schemas`);
      expect(res.status).toBe(401);
      const ok = await fetch(`http://127.0.0.1:${port}/schemas`, { headers: { authorization: "Bearer t0ken-for-test" } });
      expect(ok.status).toBe(200);
      // The token never reaches the log.
      child.proc.kill("SIGTERM");
      expect(await child.exited).toBe(0);
      expect(child.lines.join("\n")).not.toContain("t0ken-for-test");
    } finally {
      child.proc.kill("SIGKILL");
    }
  }, 90_000);
});
