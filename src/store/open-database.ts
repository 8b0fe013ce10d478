// Opens the database config names: PGlite without a URL, else PostgreSQL,
// with its hot standbys for reads when read URLs are given.
import { openPglite } from "./pglite.js";
import { openPostgres } from "./postgres.js";
import { createStatementNames } from "./prepared.js";
import { primaryWithStandbys } from "./replicas.js";
import type { Db, SessionTimeouts } from "./db.js";

export interface OpenDatabaseOptions {
  /** PostgreSQL connection string; unset = PGlite. */
  readonly databaseUrl?: string;
  /** PGlite lives under `${dataDir}/pglite`; unset = in memory. Ignored with databaseUrl. */
  readonly dataDir?: string;
  /**
   * PGlite in memory only: start from this image of a data directory (PGlite's
   * `dumpDataDir`) instead of initialising one (initdb, seconds). The test
   * suites start each store from one image made once per run.
   */
  readonly embeddedImage?: Blob;
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

export async function openDatabase(options: OpenDatabaseOptions = {}): Promise<Db> {
  if (options.databaseUrl === undefined) return openPglite(options.dataDir, options.embeddedImage);
  const timeouts: SessionTimeouts = {
    statementTimeoutMs: options.statementTimeoutMs,
    idleInTransactionMs: options.idleInTransactionMs,
  };
  // One name table for the primary and its standbys: a read may run on either.
  const names = createStatementNames();
  const primary = openPostgres(options.databaseUrl, options.poolSize ?? 10, undefined, timeouts, names);
  const readUrls = options.readUrls ?? [];
  if (readUrls.length === 0) return primary;
  const timeoutMs = options.readTimeoutMs ?? 1000;
  const standbys = readUrls.map((url) => openPostgres(url, options.poolSize ?? 10, timeoutMs, timeouts, names));
  return primaryWithStandbys(primary, standbys, { timeoutMs, stampTtlMs: options.readStampTtlMs ?? 100 });
}
