// One SQL data layer over two backends: PGlite in-process (embedded default)
// and PostgreSQL through a `pg` pool. Both hand back timestamps and int8 as
// the strings PostgreSQL wrote (a JS Date would drop the microseconds, a
// number would drop int8 precision); jsonb is parsed on both.
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import pg from "pg";
import { toServiceError } from "./db-errors.js";
import { withStandbys } from "./replicas.js";

/** Statement texts sent as named prepared statements on PostgreSQL (see `prepared`). */
const preparedNames = new Map<string, string>();

/**
 * Marks a statement text to be prepared once per PostgreSQL connection and
 * then only bound and executed: the server parses it once, not on every
 * call, and after five runs plans it once too when a generic plan costs no
 * more than the plans made for the values. For fixed texts whose plan does
 * not hinge on the values: key lookups. Generated query pages go through
 * `preparedPage`, which bounds how many texts are named. Returns the text.
 */
export function prepared(sql: string): string {
  if (!preparedNames.has(sql)) preparedNames.set(sql, `rs_${preparedNames.size + 1}`);
  return sql;
}

/** How many generated texts `preparedPage` names in a process; later ones run unnamed. */
export const MAX_PREPARED_PAGES = 100;
let preparedPages = 0;

/**
 * Marks a generated page statement of a query to be prepared once per
 * PostgreSQL connection, as `prepared` does, for the first
 * MAX_PREPARED_PAGES texts this process sends. A text is one query shape
 * (its filters, sort, read point, whether it continues a cursor); every
 * value, the limit included, is a parameter. The server then skips parsing
 * and analysing the statement on every later call: about a fifth of its CPU
 * for a page of 20 (BENCHMARKS.md, round eight). As with any prepared
 * statement, PostgreSQL plans each call for its values until a generic plan
 * costs no more than those (`plan_cache_mode`). Returns the text.
 */
export function preparedPage(sql: string): string {
  if (!preparedNames.has(sql) && preparedPages < MAX_PREPARED_PAGES) {
    preparedPages++;
    prepared(sql);
  }
  return sql;
}

/** The name a statement text is prepared under, if `prepared` marked it (the load benchmark's floor sends it the same way). */
export function preparedName(sql: string): string | undefined {
  return preparedNames.get(sql);
}

export interface TransactionOptions {
  /**
   * One read-only REPEATABLE READ snapshot, so that several statements agree
   * with each other. On PostgreSQL the transaction opens with
   * SNAPSHOT_BEGIN: one round trip, not BEGIN and then SET TRANSACTION.
   */
  readonly readOnlySnapshot?: boolean;
}

/** The mode of a read-only snapshot transaction. */
const SNAPSHOT_MODE = "ISOLATION LEVEL REPEATABLE READ, READ ONLY";

/** How a read-only snapshot transaction starts on PostgreSQL. */
export const SNAPSHOT_BEGIN = `BEGIN ${SNAPSHOT_MODE}`;

export interface Queryable {
  query<R>(sql: string, params?: readonly unknown[]): Promise<{ rows: R[] }>;
  /** Several statements without parameters (migrations). */
  exec(sql: string): Promise<void>;
}

/** What a backend can do; callers ask this, never which backend it is. */
export interface DbCapabilities {
  /** The lineage materialized view exists and may answer when fresh (PostgreSQL). */
  readonly lineageView: boolean;
  /** One snapshot handed out in batches by a server-side cursor (PostgreSQL); otherwise keyset batches at a pinned point. */
  readonly streamedBatches: boolean;
  /**
   * Notifications from every writer on the database reach db.listen(): LISTEN/NOTIFY on PostgreSQL, and
   * PGlite's own in-process LISTEN (every writer of an embedded store is in this process).
   */
  readonly listen: boolean;
  /**
   * The database lives in this process (PGlite): nothing else reads it, and
   * a key file beside its files (under dataDir) stays outside its dumps.
   */
  readonly embedded: boolean;
}

export interface ListenHandlers {
  /** A notification on the channel arrived. */
  onNotify(): void;
  /** The connection was lost (once; err when one was reported). Notifications meanwhile are lost: listen again. */
  onLost(err?: unknown): void;
}

export interface Listener {
  /** Stops listening and closes the connection; onLost is not called. */
  close(): Promise<void>;
}

/** A session advisory lock held on a connection of its own (db.lease). */
export interface Lease {
  /** Releases the lock and closes its connection; onLost is not called. */
  release(): Promise<void>;
}

export interface Db extends Queryable {
  /** A label for logs; capabilities says what the backend can do. */
  readonly kind: "pglite" | "postgres";
  readonly capabilities: DbCapabilities;
  /** The embedded store's data directory (its files are under `${dataDir}/pglite`); absent in memory and on PostgreSQL. */
  readonly dataDir?: string;
  /** A connection of its own that LISTENs on `channel`; present when capabilities.listen. */
  listen?(channel: string, handlers: ListenHandlers): Promise<Listener>;
  /**
   * Takes the session advisory lock `key` on a connection of its own, if no
   * other session (of any process) holds it; undefined when one does.
   * onLost: the connection (and with it the lock) was lost. Present when capabilities.listen.
   */
  lease?(key: number, onLost: (err?: unknown) => void): Promise<Lease | undefined>;
  /** Runs fn in one transaction; commits when it resolves, rolls back when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>, options?: TransactionOptions): Promise<T>;
  ping(): Promise<void>;
  close(): Promise<void>;
  /** Connections of the PostgreSQL pool (for metrics); absent on PGlite. */
  poolStats?(): PoolStats;
  /**
   * Where a read at `readPoint` (an as_of or pinned stamp; undefined = now,
   * at the primary's committed clock) runs: a standby that has replayed it,
   * else this database. Present with read URLs (see replicas.ts); callers
   * use readerFor(db, point), which falls back to db itself.
   */
  reader?(readPoint: string | undefined): Promise<Db>;
  /** Reads routed so far, by target (for metrics); present with read URLs. */
  readCounts?(): ReadCounts;
}

export interface ReadCounts {
  readonly primary: number;
  readonly standby: number;
}

export interface PoolStats {
  readonly total: number;
  readonly idle: number;
  readonly waiting: number;
}

export interface OpenDatabaseOptions {
  /** PostgreSQL connection string; unset = PGlite. */
  readonly databaseUrl?: string;
  /** PGlite lives under `${dataDir}/pglite`; unset = in memory. Ignored with databaseUrl. */
  readonly dataDir?: string;
  /** pg pool size (default 10). */
  readonly poolSize?: number;
  /** Hot standbys of databaseUrl for reads (replicas.ts); ignored without databaseUrl. */
  readonly readUrls?: readonly string[];
  /** Longest wait for a standby: its connection, its replayed clock (default 1000 ms). */
  readonly readTimeoutMs?: number;
  /** How long a standby's replayed clock stamp is trusted before it is asked again (default 100 ms). */
  readonly readStampTtlMs?: number;
  /** statement_timeout (ms) of every pool connection (config DATABASE_STATEMENT_TIMEOUT_MS); unset = the server's. */
  readonly statementTimeoutMs?: number;
  /** idle_in_transaction_session_timeout (ms) of every pool connection (config DATABASE_IDLE_IN_TRANSACTION_MS). */
  readonly idleInTransactionMs?: number;
}

/** Per-connection PostgreSQL timeouts (docs/contract/16-limits.md): nothing holds a statement or a transaction forever. */
export interface SessionTimeouts {
  readonly statementTimeoutMs?: number | undefined;
  readonly idleInTransactionMs?: number | undefined;
}

const OID = { INT8: 20, TIMESTAMP: 1114, TIMESTAMPTZ: 1184, DATE: 1082 } as const;
const KEEP_AS_TEXT: ReadonlySet<number> = new Set(Object.values(OID));
const asText = (x: string): string => x;

export async function openDatabase(options: OpenDatabaseOptions = {}): Promise<Db> {
  if (options.databaseUrl === undefined) return openPglite(options.dataDir);
  const timeouts: SessionTimeouts = { statementTimeoutMs: options.statementTimeoutMs, idleInTransactionMs: options.idleInTransactionMs };
  const primary = openPostgres(options.databaseUrl, options.poolSize ?? 10, undefined, timeouts);
  const readUrls = options.readUrls ?? [];
  if (readUrls.length === 0) return primary;
  const timeoutMs = options.readTimeoutMs ?? 1000;
  const standbys = readUrls.map((url) => openPostgres(url, options.poolSize ?? 10, timeoutMs, timeouts));
  return withStandbys(primary, standbys, { timeoutMs, stampTtlMs: options.readStampTtlMs ?? 100 });
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
  const parsers = Object.fromEntries([...KEEP_AS_TEXT].map((oid) => [oid, asText]));
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
    capabilities: { lineageView: false, streamedBatches: false, listen: true, embedded: true },
    ...(dataDir !== undefined ? { dataDir } : {}),
    query: (sql, params) => guard(() => root.query(sql, params)),
    exec: (sql) => guard(() => root.exec(sql)),
    transaction: (fn, options) =>
      guard(() =>
        lite.transaction(async (tx) => {
          if (options?.readOnlySnapshot === true) await tx.query(`SET TRANSACTION ${SNAPSHOT_MODE}`);
          return fn(wrap(tx));
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
    },
  };
}

/**
 * Every pool connection's session settings (also the benchmarks' baselines).
 * The store's statements are short index lookups. Before statistics exist (a
 * fresh database, right after a bulk load) the planner can overestimate them
 * past jit_above_cost and spend most of a read compiling: 780 ms of an 830 ms
 * as_of read was measured. JIT only pays for long analytic scans, which this
 * service does not run.
 */
export const SESSION_OPTIONS = "-c jit=off";

export function openPostgres(url: string, poolSize: number, connectionTimeoutMillis = 10_000, timeouts: SessionTimeouts = {}): Db {
  const getTypeParser = (oid: number, format?: "text" | "binary"): ((value: string) => unknown) =>
    KEEP_AS_TEXT.has(oid) ? asText : (pg.types.getTypeParser(oid, format) as (value: string) => unknown);
  const pool = new pg.Pool({
    connectionString: url,
    max: poolSize,
    connectionTimeoutMillis,
    options: SESSION_OPTIONS,
    types: { getTypeParser },
    // Sent with the startup packet, so every connection of the pool has them from its first statement.
    ...(timeouts.statementTimeoutMs !== undefined ? { statement_timeout: timeouts.statementTimeoutMs } : {}),
    ...(timeouts.idleInTransactionMs !== undefined ? { idle_in_transaction_session_timeout: timeouts.idleInTransactionMs } : {}),
  });
  // An idle client whose backend dies emits "error" on the pool; without a
  // listener that would crash the process. The pool drops the client itself.
  pool.on("error", () => {});
  const wrap = (c: pg.Pool | pg.PoolClient): Queryable => ({
    async query<R>(sql: string, params?: readonly unknown[]) {
      const values = params ? [...params] : undefined;
      const name = preparedNames.get(sql);
      const res = await (name === undefined ? c.query(sql, values) : c.query({ name, text: sql, ...(values ? { values } : {}) }));
      return { rows: res.rows as R[] };
    },
    async exec(sql: string) {
      await c.query(sql);
    },
  });
  const root = wrap(pool);
  return {
    kind: "postgres",
    capabilities: { lineageView: true, streamedBatches: true, listen: true, embedded: false },
    listen: (channel, handlers) => listenPostgres(url, channel, handlers),
    lease: (key, onLost) => leasePostgres(url, key, onLost),
    query: (sql, params) => guard(() => root.query(sql, params)),
    exec: (sql) => guard(() => root.exec(sql)),
    async transaction<T>(fn: (tx: Queryable) => Promise<T>, options?: TransactionOptions): Promise<T> {
      const client = await guard(() => pool.connect());
      let broken = false;
      const onError = () => {
        broken = true;
      };
      client.on("error", onError);
      try {
        await client.query(options?.readOnlySnapshot === true ? SNAPSHOT_BEGIN : "BEGIN");
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

const CHANNEL = /^[a-z_][a-z0-9_]*$/;

/** LISTEN needs a connection that stays open: one pg.Client beside the pool. */
async function listenPostgres(url: string, channel: string, handlers: ListenHandlers): Promise<Listener> {
  if (!CHANNEL.test(channel)) throw new Error(`not a channel name: ${channel}`);
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  let ready = false;
  let done = false;
  const quiet = async () => {
    c.removeAllListeners("end");
    c.removeAllListeners("error");
    c.on("error", () => {});
    await c.end().catch(() => {});
  };
  const lose = (err?: unknown) => {
    if (!ready || done) return;
    done = true;
    void quiet();
    handlers.onLost(err);
  };
  c.on("notification", (msg) => {
    if (msg.channel === channel) handlers.onNotify();
  });
  c.on("error", (err) => lose(err));
  c.on("end", () => lose());
  try {
    await c.connect();
    await c.query(`LISTEN ${channel}`);
  } catch (err) {
    await quiet();
    throw err;
  }
  ready = true;
  return {
    async close() {
      done = true;
      await quiet();
    },
  };
}

/** A session advisory lock lives as long as its connection: one pg.Client beside the pool. */
async function leasePostgres(url: string, key: number, onLost: (err?: unknown) => void): Promise<Lease | undefined> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  let held = false;
  const quiet = async () => {
    held = false;
    c.removeAllListeners("end");
    c.removeAllListeners("error");
    c.on("error", () => {});
    await c.end().catch(() => {});
  };
  const lose = (err?: unknown) => {
    if (!held) return;
    void quiet();
    onLost(err);
  };
  c.on("error", (err) => lose(err));
  c.on("end", () => lose());
  try {
    await c.connect();
    const { rows } = await c.query<{ ok: boolean }>("SELECT pg_try_advisory_lock($1::bigint) AS ok", [key]);
    if (rows[0]?.ok !== true) {
      await quiet();
      return undefined;
    }
  } catch (err) {
    await quiet();
    throw err;
  }
  held = true;
  return { release: quiet };
}
