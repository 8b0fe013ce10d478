// What a database is to the store, whichever backend serves it: PGlite
// in-process (pglite.ts, the embedded default) or PostgreSQL through a `pg`
// pool (postgres.ts), opened by open-database.ts. Both hand back timestamps
// and int8 as the strings PostgreSQL wrote (a JS Date would drop the
// microseconds, a number would drop int8 precision); jsonb is parsed on both.
import type { Readable } from "node:stream";
import type { StatementNames } from "./prepared.js";

export interface TransactionOptions {
  /**
   * One read-only REPEATABLE READ snapshot, so that several statements agree
   * with each other. On PostgreSQL the transaction opens with
   * SNAPSHOT_BEGIN: one round trip, not BEGIN and then SET TRANSACTION.
   */
  readonly readOnlySnapshot?: boolean;
}

/** The mode of a read-only snapshot transaction. */
export const SNAPSHOT_MODE = "ISOLATION LEVEL REPEATABLE READ, READ ONLY";

/** How a read-only snapshot transaction starts on PostgreSQL. */
export const SNAPSHOT_BEGIN = `BEGIN ${SNAPSHOT_MODE}`;

export interface Queryable {
  query<R>(sql: string, params?: readonly unknown[]): Promise<{ rows: R[] }>;
  /** Several statements without parameters (migrations). */
  exec(sql: string): Promise<void>;
  /**
   * A `COPY ... TO STDOUT` statement on this connection (inside its
   * transaction), as a byte stream: the connection pauses while the
   * consumer does not read. Present on a PostgreSQL transaction.
   */
  copyTo?(copySql: string): Readable;
  /**
   * Rows in COPY's text format (tab-separated, `\N` for null, every row
   * "\n"-terminated) into `table (columns)` on this connection, inside its
   * transaction: `COPY ... FROM STDIN` on PostgreSQL, `FROM '/dev/blob'` on
   * PGlite. Present on a transaction of either backend.
   */
  copyIn?(table: string, columns: readonly string[], rows: string): Promise<void>;
}

/** What a backend can do; callers ask this, never which backend it is. */
interface DbCapabilities {
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
  /** Waits for the statistics work in flight (PGlite's own ANALYZE after writes, pglite.ts); present on PGlite. */
  analyzed?(): Promise<void>;
  /** Connections of the PostgreSQL pool (for metrics); absent on PGlite. */
  poolStats?(): PoolStats;
  /**
   * Where a read at `readPoint` (an as_of or pinned stamp; undefined = now,
   * at the primary's committed clock) runs: a standby that has replayed it,
   * else this database. Present with read URLs (replicas.ts); callers
   * use readerFor(db, point), which falls back to db itself.
   */
  reader?(readPoint: string | undefined): Promise<Db>;
  /** Reads routed so far, by target (for metrics); present with read URLs. */
  readCounts?(): ReadCounts;
  /**
   * The rows of one statement as PostgreSQL's binary COPY stream (`COPY
   * (sql) TO STDOUT (FORMAT binary)`, copy-out.ts), in pieces, on a
   * connection of its own; reading pauses while the consumer does not pull,
   * and stopping early drops the connection. Present on PostgreSQL.
   */
  readonly copyOut?: (sql: string, params: readonly unknown[]) => AsyncIterable<Uint8Array>;
  /** The names its statements are prepared under (prepared.ts); present on PostgreSQL. */
  readonly statementNames?: StatementNames;
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

/** Per-connection PostgreSQL timeouts (docs/contract/16-limits.md): nothing holds a statement or a transaction forever. */
export interface SessionTimeouts {
  readonly statementTimeoutMs?: number | undefined;
  readonly idleInTransactionMs?: number | undefined;
}

const OID = { INT8: 20, TIMESTAMP: 1114, TIMESTAMPTZ: 1184, DATE: 1082 } as const;
/** Types both backends hand back as the text PostgreSQL wrote. */
export const KEEP_AS_TEXT: ReadonlySet<number> = new Set(Object.values(OID));
export const asText = (x: string): string => x;
