// One SQL data layer over two backends: PGlite in-process (embedded default)
// and PostgreSQL through a `pg` pool. Both hand back timestamps and int8 as
// the strings PostgreSQL wrote (a JS Date would drop the microseconds, a
// number would drop int8 precision); jsonb is parsed on both.
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import pg from "pg";
import { toServiceError } from "./db-errors.js";

export interface Queryable {
  query<R>(sql: string, params?: readonly unknown[]): Promise<{ rows: R[] }>;
  /** Several statements without parameters (migrations). */
  exec(sql: string): Promise<void>;
}

export interface Db extends Queryable {
  readonly kind: "pglite" | "postgres";
  /** Runs fn in one transaction; commits when it resolves, rolls back when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  ping(): Promise<void>;
  close(): Promise<void>;
  /** Connections of the PostgreSQL pool (for metrics); absent on PGlite. */
  poolStats?(): PoolStats;
}

export interface PoolStats {
  readonly total: number;
  readonly idle: number;
  readonly waiting: number;
}

export interface OpenDatabaseOptions {
  /** PostgreSQL connection string; unset = PGlite. */
  readonly databaseUrl?: string;
  /** PGlite lives under `${dataDir}/pglite`; unset = in memory. */
  readonly dataDir?: string;
  /** pg pool size (default 10). */
  readonly poolSize?: number;
}

const OID = { INT8: 20, TIMESTAMP: 1114, TIMESTAMPTZ: 1184, DATE: 1082 } as const;
const KEEP_AS_TEXT: ReadonlySet<number> = new Set(Object.values(OID));

export async function openDatabase(options: OpenDatabaseOptions = {}): Promise<Db> {
  return options.databaseUrl !== undefined ? openPostgres(options.databaseUrl, options.poolSize ?? 10) : openPglite(options.dataDir);
}

async function guard<T>(p: () => Promise<T>): Promise<T> {
  try {
    return await p();
  } catch (err) {
    throw toServiceError(err);
  }
}

async function openPglite(dataDir: string | undefined): Promise<Db> {
  let dir: string | undefined;
  if (dataDir !== undefined) {
    dir = join(dataDir, "pglite");
    await mkdir(dir, { recursive: true });
  }
  const identity = (x: string) => x;
  const parsers = Object.fromEntries([...KEEP_AS_TEXT].map((oid) => [oid, identity]));
  const lite = await PGlite.create({ ...(dir !== undefined ? { dataDir: dir } : {}), parsers });
  const wrap = (q: Pick<PGlite, "query" | "exec">): Queryable => ({
    async query<R>(sql: string, params?: readonly unknown[]) {
      const res = await q.query<R>(sql, params ? [...params] : undefined);
      return { rows: res.rows };
    },
    async exec(sql: string) {
      await q.exec(sql);
    },
  });
  const root = wrap(lite);
  return {
    kind: "pglite",
    query: (sql, params) => guard(() => root.query(sql, params)),
    exec: (sql) => guard(() => root.exec(sql)),
    transaction: (fn) => guard(() => lite.transaction((tx) => fn(wrap(tx)))),
    ping: () => guard(async () => void (await lite.query("SELECT 1"))),
    close: async () => {
      if (!lite.closed) await lite.close();
    },
  };
}

function openPostgres(url: string, poolSize: number): Db {
  const getTypeParser = (oid: number, format?: "text" | "binary"): ((value: string) => unknown) =>
    KEEP_AS_TEXT.has(oid) ? (x) => x : (pg.types.getTypeParser(oid, format) as (value: string) => unknown);
  const pool = new pg.Pool({
    connectionString: url,
    max: poolSize,
    connectionTimeoutMillis: 10_000,
    // The store's statements are short index lookups. Before statistics
    // exist (a fresh database, right after a bulk load) the planner can
    // overestimate them past jit_above_cost and spend most of a read
    // compiling: 780 ms of an 830 ms as_of read was measured. JIT only pays
    // for long analytic scans, which this service does not run.
    options: "-c jit=off",
    types: { getTypeParser },
  });
  // An idle client whose backend dies emits "error" on the pool; without a
  // listener that would crash the process. The pool drops the client itself.
  pool.on("error", () => {});
  const wrap = (c: pg.Pool | pg.PoolClient): Queryable => ({
    async query<R>(sql: string, params?: readonly unknown[]) {
      const res = await c.query(sql, params ? [...params] : undefined);
      return { rows: res.rows as R[] };
    },
    async exec(sql: string) {
      await c.query(sql);
    },
  });
  const root = wrap(pool);
  return {
    kind: "postgres",
    query: (sql, params) => guard(() => root.query(sql, params)),
    exec: (sql) => guard(() => root.exec(sql)),
    async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
      const client = await guard(() => pool.connect());
      let broken = false;
      const onError = () => {
        broken = true;
      };
      client.on("error", onError);
      try {
        await client.query("BEGIN");
        const result = await fn(wrap(client));
        await client.query("COMMIT");
        return result;
      } catch (err) {
        if (!broken) {
          try {
            await client.query("ROLLBACK");
          } catch {
            broken = true;
          }
        }
        throw toServiceError(err);
      } finally {
        client.off("error", onError);
        // A client whose connection failed is destroyed, not returned to the pool.
        client.release(broken ? true : undefined);
      }
    },
    ping: () => guard(async () => void (await pool.query("SELECT 1"))),
    close: () => pool.end(),
    poolStats: () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
  };
}
