// DATA_DIR is owner-only (docs/operations.md): the service started under umask 022
// creates its embedded database, object store and registry key 0600/0700,
// and a store whose modes were widened since is corrected at the next
// start, with a log line saying so.
import { spawn } from "node:child_process";
import { chmod, lstat, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { listeningPort, type MainProcess } from "../support/main-process.js";

const root = join(import.meta.dirname, "../..");

/** src/main.ts under `umask 022`, as a shell would start it. */
function startUnderUmask022(env: Record<string, string>): MainProcess {
  const proc = spawn("/bin/sh", ["-c", 'umask 022 && exec "$0" --import tsx src/main.ts', process.execPath], {
    cwd: root,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", PORT: "0", LOG_LEVEL: "info", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  for (const s of [proc.stdout, proc.stderr])
    s.on("data", (d: Buffer) =>
      lines.push(
        ...d
          .toString()
          .split("\n")
          .filter((l) => l !== ""),
      ),
    );
  const exited = new Promise<number | null>((resolve) => proc.once("exit", (code) => resolve(code)));
  return { proc, lines, exited };
}

/** Every entry under `dir` (itself included) with its permission bits. */
async function modes(dir: string): Promise<{ path: string; mode: number; dir: boolean }[]> {
  const out: { path: string; mode: number; dir: boolean }[] = [];
  const visit = async (p: string): Promise<void> => {
    const st = await lstat(p);
    if (st.isSymbolicLink()) return;
    out.push({ path: p, mode: st.mode & 0o777, dir: st.isDirectory() });
    if (st.isDirectory()) for (const n of await readdir(p)) await visit(join(p, n));
  };
  await visit(dir);
  return out;
}

async function stop(child: MainProcess): Promise<void> {
  child.proc.kill("SIGTERM");
  await child.exited;
}

describe("DATA_DIR's modes", () => {
  let dataDir: string;
  afterAll(async () => {
    if (dataDir !== undefined) await rm(dataDir, { recursive: true, force: true });
  });

  it("are owner-only for everything the service creates there, under umask 022", async () => {
    dataDir = join(await mkdtemp(join(tmpdir(), "rs-modes-")), "data");
    const child = startUnderUmask022({ DATA_DIR: dataDir });
    try {
      const port = await listeningPort(child, 120_000);
      // A write, and a registration (the registry key is in use).
      const post = (path: string, body: unknown) =>
        fetch(`http://127.0.0.1:${port}${path}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body),
        });
      expect(
        (
          await post("/resources/create", {
            resources: [{ identifier: "m1", payload_type: "datasource", name: "modes" }],
          })
        ).status,
      ).toBe(200);
      expect((await post("/patients/register", { datasource_id: "m1", external_uid: "MRN-1" })).status).toBeLessThan(
        500,
      );
    } finally {
      await stop(child);
    }
    const entries = await modes(dataDir);
    expect(entries.some((e) => e.path.endsWith("registry-secret"))).toBe(true);
    expect(entries.some((e) => e.path.includes(`${join(dataDir, "s3")}`))).toBe(true);
    expect(entries.length).toBeGreaterThan(100);
    const open = entries
      .filter((e) => (e.mode & 0o077) !== 0)
      .map((e) => `${e.path.slice(dataDir.length)} ${e.mode.toString(8)}`);
    expect(open).toEqual([]);
  });

  it("are corrected at start when an existing store's are wider, with a log line", async () => {
    // Widen everything (the state an earlier version left under umask 022, and worse).
    const before = await modes(dataDir);
    for (const e of before) await chmod(e.path, e.dir ? 0o777 : 0o666);
    const child = startUnderUmask022({ DATA_DIR: dataDir });
    let line: { corrected?: number; msg?: string } | undefined;
    try {
      await listeningPort(child, 120_000);
      line = child.lines
        .map((l) => JSON.parse(l) as { corrected?: number; msg?: string })
        .find((j) => j.corrected !== undefined);
    } finally {
      await stop(child);
    }
    expect(line?.msg).toMatch(/owner-only/);
    expect(line?.corrected).toBeGreaterThanOrEqual(before.length);
    const open = (await modes(dataDir))
      .filter((e) => (e.mode & 0o077) !== 0)
      .map((e) => `${e.path.slice(dataDir.length)} ${e.mode.toString(8)}`);
    expect(open).toEqual([]);
  });
});
