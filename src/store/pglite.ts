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

/**
 * The tables of the current schema grown by more than a tenth (and 8 pages)
 * since their last ANALYZE, or never analysed with 8 pages or more: what
 * PostgreSQL's autovacuum would analyse (docs/scaling.md, the embedded store).
 * Sizes come from the files and pg_class, never from the rows.
 */
const STALE_TABLES = `
  SELECT format('%I.%I', n.nspname, c.relname) AS name
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
         LATERAL (SELECT pg_relation_size(c.oid) / current_setting('block_size')::int AS pages) s
   WHERE c.relkind = 'r' AND n.nspname = current_schema()
     AND s.pages >= 8 AND s.pages > greatest(c.relpages, 0) * 1.1 + 8`;

/** Write transactions between two checks for stale statistics, at most; and the longest wait (ms) after a write. */
const ANALYZE_EVERY_WRITES = 16;
const ANALYZE_CHECK_MS = 1000;

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
  // PGlite runs no autovacuum, so nothing else gives its planner statistics:
  // without them an equality filter on an indexed payload field read every
  // row of a 200k store. After write transactions (every 16th, or the first
  // a second after the last check) a check in the background ANALYZEs the
  // tables that grew; PGlite's one connection takes it between statements.
  let writes = 0;
  let lastCheck = 0;
  let analysing: Promise<void> | undefined;
  const analyse = (): Promise<void> =>
    (analysing ??= (async () => {
      try {
        const { rows } = await lite.query<{ name: string }>(STALE_TABLES);
        for (const r of rows) if (!lite.closed) await lite.exec(`ANALYZE ${r.name}`);
      } catch {
        // Statistics are an optimisation: a failed check (a store closing) is retried after later writes.
      } finally {
        writes = 0;
        lastCheck = Date.now();
        analysing = undefined;
      }
    })());
  const afterWrite = () => {
    writes += 1;
    if (analysing === undefined && (writes >= ANALYZE_EVERY_WRITES || Date.now() - lastCheck >= ANALYZE_CHECK_MS))
      void analyse();
  };
  return {
    kind: "pglite",
    capabilities: { streamedBatches: false, listen: true, embedded: true },
    ...(dataDir !== undefined ? { dataDir } : {}),
    query: (sql, params) => guard(() => root.query(sql, params)),
    exec: (sql) => guard(() => root.exec(sql)),
    transaction: async (fn, options) => {
      const readOnly = options?.readOnlySnapshot === true;
      const result = await guard(() =>
        lite.transaction(async (tx) => {
          if (readOnly) await tx.query(`SET TRANSACTION ${SNAPSHOT_MODE}`);
          return fn(wrapTx(tx));
        }),
      );
      if (!readOnly) afterWrite();
      return result;
    },
    analyzed: async () => {
      await analysing;
    },
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
      await analysing;
      if (!lite.closed) await lite.close();
      await unlock();
    },
  };
}
