// The real entry point as a child process: SIGTERM lets an in-flight call
// finish (its body is still arriving when the signal comes) and the process
// exits 0. Start-up refuses a non-loopback HOST without authentication.
import http from "node:http";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listeningPort, startMain, type MainProcess } from "../support/main-process.js";

let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "rs-main-"));
});
afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

/** The entry point on a data directory of this file's own. */
const start = (env: Record<string, string>): MainProcess => startMain({ DATA_DIR: dataDir, ...env });

describe("the process", () => {
  it("drains an in-flight call on SIGTERM and exits 0", async () => {
    const child = start({});
    try {
      const port = await listeningPort(child);
      const body = JSON.stringify({
        resources: [{ identifier: "drained", payload_type: "annotation", label: "slow" }],
      });
      const half = Math.floor(body.length / 2);
      const answer = new Promise<{ status: number; text: string }>((resolve, reject) => {
        const req = http.request(
          {
            port,
            host: "127.0.0.1",
            method: "POST",
            path: "/resources/create",
            headers: { "content-type": "application/json" },
          },
          (res) => {
            let text = "";
            res.on("data", (d: Buffer) => (text += d.toString()));
            res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
          },
        );
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
    const child = start({ HOST: "0.0.0.0" });
    const code = await child.exited;
    expect(code).not.toBe(0);
    expect(child.lines.join("\n")).toMatch(/HOST.*authentication is off/);
  }, 60_000);

  it("listens beyond loopback once tokens are configured", async () => {
    const child = start({ HOST: "0.0.0.0", API_TOKENS: "t0ken-for-test=read" });
    try {
      const port = await listeningPort(child);
      const res = await fetch(`http://127.0.0.1:${port}/schemas`);
      expect(res.status).toBe(401);
      const ok = await fetch(`http://127.0.0.1:${port}/schemas`, {
        headers: { authorization: "Bearer t0ken-for-test" },
      });
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
