// A real PostgreSQL primary and a streaming-replication hot standby, built
// on this machine from the installed binaries (initdb, pg_ctl,
// pg_basebackup -R) in a temporary directory, on free ports of their own.
// stop() stops both servers and removes the directory; it is safe to call
// after a failed start. initdb refuses root: as root the servers run as the
// `postgres` user (runuser).
import { execFile, execFileSync } from "node:child_process";
import { existsSync, readdirSync, rmSync } from "node:fs";
import { appendFile, chown, mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import pg from "pg";

const run = promisify(execFile);
const TOOLS = ["initdb", "pg_ctl", "pg_basebackup", "postgres"] as const;

/** The directory holding every PostgreSQL server tool, or undefined when there is none on this machine. */
export function findPostgresBin(): string | undefined {
  const candidates: string[] = [];
  if (process.env.PG_BIN) candidates.push(process.env.PG_BIN);
  const debian = "/usr/lib/postgresql";
  if (existsSync(debian)) {
    const versions = readdirSync(debian)
      .filter((v) => /^\d+$/.test(v))
      .sort((a, b) => Number(b) - Number(a));
    candidates.push(...versions.map((v) => join(debian, v, "bin")));
  }
  candidates.push(...(process.env.PATH ?? "").split(":").filter((d) => d !== ""));
  return candidates.find((dir) => TOOLS.every((t) => existsSync(join(dir, t))));
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr !== null ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export interface PgCluster {
  readonly primaryUrl: string;
  readonly standbyUrl: string;
  /** Runs SQL on the standby (pause/resume replay, read its clock). */
  standbySql<R = Record<string, unknown>>(sql: string): Promise<R[]>;
  /** Waits until the standby has replayed everything the primary has written so far. */
  caughtUp(timeoutMs?: number): Promise<void>;
  stopStandby(): Promise<void>;
  startStandby(): Promise<void>;
  /** Stops both servers and removes their files (idempotent). */
  stop(): Promise<void>;
}

export async function startPgCluster(bin: string, database = "rs"): Promise<PgCluster> {
  const root = process.getuid?.() === 0;
  if (root) {
    // initdb will not run as root; the servers run as postgres.
    await run("id", ["-u", "postgres"]).catch(() => {
      throw new Error("running as root needs a `postgres` user to run the PostgreSQL servers");
    });
  }
  const exec = (tool: string, args: string[]) =>
    root ? run("runuser", ["-u", "postgres", "--", join(bin, tool), ...args]) : run(join(bin, tool), args);

  const dir = await mkdtemp(join(tmpdir(), "rs-replicas-"));
  const primaryDir = join(dir, "primary");
  const standbyDir = join(dir, "standby");
  const started: string[] = [];
  const stopServer = async (data: string) => {
    await exec("pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"]).catch(() => {});
  };
  let stopped = false;
  // If the process ends without stop() (a crashed or interrupted run), the servers and files go with it.
  const onExit = () => {
    for (const d of [...started].reverse()) {
      const args = ["-D", d, "-m", "immediate", "-w", "stop"];
      try {
        if (root) execFileSync("runuser", ["-u", "postgres", "--", join(bin, "pg_ctl"), ...args], { stdio: "ignore" });
        else execFileSync(join(bin, "pg_ctl"), args, { stdio: "ignore" });
      } catch {
        // already stopped
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.once("exit", onExit);
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    process.off("exit", onExit);
    for (const d of [...started].reverse()) await stopServer(d);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    if (root) {
      const { stdout } = await run("id", ["-u", "postgres"]);
      const { stdout: gid } = await run("id", ["-g", "postgres"]);
      await chown(dir, Number(stdout.trim()), Number(gid.trim()));
    }
    const [pPort, sPort] = [await freePort(), await freePort()];
    await exec("initdb", [
      "-D",
      primaryDir,
      "-U",
      "postgres",
      "--auth=trust",
      "-E",
      "UTF8",
      "--no-sync",
      "--no-instructions",
    ]);
    const common = [
      "listen_addresses = '127.0.0.1'",
      `unix_socket_directories = '${dir}'`,
      "wal_level = replica",
      "max_wal_senders = 4",
      "hot_standby = on",
      "hot_standby_feedback = on",
      "fsync = off",
      "full_page_writes = off",
      "shared_buffers = 32MB",
      "max_connections = 60",
      "wal_receiver_status_interval = 1s",
    ].join("\n");
    await appendFile(join(primaryDir, "postgresql.conf"), `\n${common}\nport = ${pPort}\n`);
    const start = async (data: string) => {
      await exec("pg_ctl", [
        "-D",
        data,
        "-l",
        join(dir, `${data === primaryDir ? "primary" : "standby"}.log`),
        "-w",
        "-t",
        "30",
        "start",
      ]);
      if (!started.includes(data)) started.push(data);
    };
    await start(primaryDir);
    await exec("pg_basebackup", [
      "-h",
      "127.0.0.1",
      "-p",
      String(pPort),
      "-U",
      "postgres",
      "-D",
      standbyDir,
      "-R",
      "-X",
      "stream",
      "-c",
      "fast",
      "--no-sync",
    ]);
    await appendFile(join(standbyDir, "postgresql.conf"), `\nport = ${sPort}\n`);
    await start(standbyDir);

    const admin = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${pPort}/postgres` });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE ${database}`);
    } finally {
      await admin.end();
    }
    const primaryUrl = `postgres://postgres@127.0.0.1:${pPort}/${database}`;
    const standbyUrl = `postgres://postgres@127.0.0.1:${sPort}/${database}`;
    const sql = async <R>(url: string, text: string): Promise<R[]> => {
      const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
      await c.connect();
      try {
        return (await c.query(text)).rows as R[];
      } finally {
        await c.end();
      }
    };
    const cluster: PgCluster = {
      primaryUrl,
      standbyUrl,
      standbySql: (text) => sql(standbyUrl, text),
      async caughtUp(timeoutMs = 20_000) {
        const [{ lsn } = { lsn: "" }] = await sql<{ lsn: string }>(
          `postgres://postgres@127.0.0.1:${pPort}/postgres`,
          "SELECT pg_current_wal_lsn()::text AS lsn",
        );
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          const [row] = await sql<{ ok: boolean }>(
            `postgres://postgres@127.0.0.1:${sPort}/postgres`,
            `SELECT pg_last_wal_replay_lsn() >= '${lsn}'::pg_lsn AS ok`,
          );
          if (row?.ok === true) return;
          if (Date.now() > deadline) throw new Error("the standby did not catch up");
          await new Promise((r) => setTimeout(r, 20));
        }
      },
      stopStandby: () => stopServer(standbyDir),
      startStandby: () => start(standbyDir),
      stop,
    };
    // The standby accepts connections once it is consistent; the database exists there too once replayed.
    await cluster.caughtUp();
    return cluster;
  } catch (err) {
    await stop();
    throw err;
  }
}
