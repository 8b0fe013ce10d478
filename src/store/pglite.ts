// The embedded backend: PGlite in this process, in memory or under
// `${dataDir}/pglite`. Statements are never named here (one connection, no
// server to parse them again).
import { mkdir, readFile, unlink, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { PGlite, type Transaction } from "@electric-sql/pglite";
import { guard } from "./db-errors.js";
import { asText, KEEP_AS_TEXT, SNAPSHOT_MODE, type Db, type Queryable } from "./db.js";

/** The lock file of an embedded store in use, beside its files: the pid of the process that holds it. */
const EMBEDDED_LOCK_FILE = "pglite.lock";

/** Embedded stores this process holds (a second open in-process is refused as one by another process is). */
const heldHere = new Set<string>();

function lockedMessage(dataDir: string, holder: string): string {
  return (
    `the embedded store in ${dataDir} is in use by ${holder}: PGlite is one process's, and a second one would damage it. ` +
    "Stop that process first, or back a running service up online (resource-store --url URL dump -o FILE)"
  );
}

/**
 * Takes the embedded store in `dataDir` for this process (docs/operations.md: a dump
 * of a store the service held ran, then the next one aborted inside PGlite).
 * The lock file holds the holder's pid; a lock whose process is gone (a
 * crash, a kill) is stale and taken over, and so is one naming this
 * process's own pid (a container's pid 1 restarted). Answers the release.
 */
async function lockEmbedded(dataDir: string): Promise<() => Promise<void>> {
  const key = resolve(dataDir);
  if (heldHere.has(key)) throw new Error(lockedMessage(dataDir, "this process"));
  const file = join(dataDir, EMBEDDED_LOCK_FILE);
  for (let attempt = 0; ; attempt++) {
    try {
      await writeFile(file, `${process.pid}\n`, { flag: "wx", mode: 0o600 });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST" || attempt > 0) throw err;
    }
    const pid = Number((await readFile(file, "utf8").catch(() => "")).trim());
    if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && alive(pid))
      throw new Error(lockedMessage(dataDir, `process ${pid}`));
    await unlink(file).catch(() => undefined);
  }
  heldHere.add(key);
  let released = false;
  return async () => {
    if (released) return;
    released = true;
    heldHere.delete(key);
    await unlink(file).catch(() => undefined);
  };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists, and is someone else's.
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

export async function openPglite(dataDir: string | undefined, image?: Blob): Promise<Db> {
  let dir: string | undefined;
  let unlock = (): Promise<void> => Promise.resolve();
  if (dataDir !== undefined) {
    dir = join(dataDir, "pglite");
    await mkdir(dir, { recursive: true });
    unlock = await lockEmbedded(dataDir);
  }
  const parsers = Object.fromEntries([...KEEP_AS_TEXT].map((oid) => [oid, asText]));
  let lite: PGlite;
  try {
    lite = await PGlite.create({
      ...(dir !== undefined ? { dataDir: dir } : image !== undefined ? { loadDataDir: image } : {}),
      parsers,
    });
  } catch (err) {
    await unlock();
    throw err;
  }
  const wrap = (q: Pick<PGlite, "query" | "exec">): Queryable => ({
    async query<R>(sql: string, params?: readonly unknown[]) {
      const res = await q.query<R>(sql, params ? [...params] : undefined);
      return { rows: res.rows };
    },
    async exec(sql: string) {
      await q.exec(sql);
    },
  });
  // A transaction can also COPY rows in (restore, dump.ts), from a blob: PGlite's COPY reads the device /dev/blob.
  const wrapTx = (tx: Transaction): Queryable => ({
    ...wrap(tx),
    async copyIn(table, columns, rows) {
      await tx.query(`COPY ${table} (${columns.join(", ")}) FROM '/dev/blob'`, [], { blob: new Blob([rows]) });
    },
  });
  const root = wrap(lite);
  return {
    kind: "pglite",
    capabilities: { streamedBatches: false, listen: true, embedded: true },
    ...(dataDir !== undefined ? { dataDir } : {}),
    query: (sql, params) => guard(() => root.query(sql, params)),
    exec: (sql) => guard(() => root.exec(sql)),
    transaction: (fn, options) =>
      guard(() =>
        lite.transaction(async (tx) => {
          if (options?.readOnlySnapshot === true) await tx.query(`SET TRANSACTION ${SNAPSHOT_MODE}`);
          return fn(wrapTx(tx));
        }),
      ),
    ping: () => guard(async () => void (await lite.query("SELECT 1"))),
    // The notification arrives in-process when the writing transaction commits; the connection is never lost.
    listen: async (channel, handlers) => {
      const off = await lite.listen(channel, () => handlers.onNotify());
      return {
        close: async () => {
          if (!lite.closed) await off();
        },
      };
    },
    close: async () => {
      if (!lite.closed) await lite.close();
      await unlock();
    },
  };
}
