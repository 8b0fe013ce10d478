// The PostgreSQL backend: a `pg` pool, with LISTEN and session advisory
// locks on connections of their own beside it.
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import pg from "pg";
import { from as copyFromStdin, to as copyToStdout } from "pg-copy-streams";
import { copyOutBinary } from "./copy-out.js";
import { guard, toServiceError } from "./db-errors.js";
import {
  asText,
  KEEP_AS_TEXT,
  SNAPSHOT_BEGIN,
  type Db,
  type Lease,
  type Listener,
  type ListenHandlers,
  type Queryable,
  type SessionTimeouts,
  type TransactionOptions,
} from "./db.js";
import { createStatementNames, type StatementNames } from "./prepared.js";

/**
 * Every pool connection's session settings (also the benchmarks' baselines).
 * The store's statements are short index lookups. Before statistics exist (a
 * fresh database, right after a bulk load) the planner can overestimate them
 * past jit_above_cost and spend most of a read compiling: 780 ms of an 830 ms
 * as_of read was measured. JIT only pays for long analytic scans, which this
 * service does not run.
 */
export const SESSION_OPTIONS = "-c jit=off";

/**
 * A Db over one PostgreSQL server. `names` is the statement name table; the
 * primary and its standbys share one (open-database.ts), so a text has one
 * name on every server.
 */
export function openPostgres(
  url: string,
  poolSize: number,
  connectionTimeoutMillis = 10_000,
  timeouts: SessionTimeouts = {},
  names: StatementNames = createStatementNames(),
): Db {
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
    ...(timeouts.idleInTransactionMs !== undefined
      ? { idle_in_transaction_session_timeout: timeouts.idleInTransactionMs }
      : {}),
  });
  // An idle client whose backend dies emits "error" on the pool; without a
  // listener that would crash the process. The pool drops the client itself.
  pool.on("error", () => {});
  const wrap = (c: pg.Pool | pg.PoolClient): Queryable => ({
    async query<R>(sql: string, params?: readonly unknown[]) {
      const values = params ? [...params] : undefined;
      const name = names.nameOf(sql);
      const res = await (name === undefined
        ? c.query(sql, values)
        : c.query({ name, text: sql, ...(values ? { values } : {}) }));
      return { rows: res.rows as R[] };
    },
    async exec(sql: string) {
      await c.query(sql);
    },
  });
  // A transaction's connection can also COPY (dump and restore, dump.ts).
  const wrapClient = (c: pg.PoolClient): Queryable => ({
    ...wrap(c),
    copyTo(copySql) {
      const stream = c.query(copyToStdout(copySql));
      let ended = false;
      stream.once("end", () => {
        ended = true;
      });
      // Stopped before its end (the reader failed, the file could not be written): the connection is still in
      // COPY mode and would hold every later statement, the transaction's ROLLBACK too. Drop it; the
      // transaction then fails and releases it as broken (as copy-out.ts does).
      stream.once("close", () => {
        if (!ended) (c as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
      });
      return stream;
    },
    async copyIn(table, columns, rows) {
      await pipeline(Readable.from([rows]), c.query(copyFromStdin(`COPY ${table} (${columns.join(", ")}) FROM STDIN`)));
    },
  });
  const root = wrap(pool);
  return {
    kind: "postgres",
    capabilities: { streamedBatches: true, listen: true, embedded: false },
    statementNames: names,
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
        const result = await fn(wrapClient(client));
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
    copyOut: (sql, params) => copyOutBinary(pool, sql, params, { statementTimeoutMs: timeouts.statementTimeoutMs }),
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
