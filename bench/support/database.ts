// Every benchmark makes its own PostgreSQL database and drops it, like the
// tests (test/support/postgres.ts), on the server of TEST_DATABASE_URL.
import pg from "pg";
import { SESSION_OPTIONS } from "../../src/store/index.js";
import { ADMIN_URL, createTestDatabase, postgresReachable } from "../../test/support/postgres.js";
import { onStop, stopping } from "./on-stop.js";

export interface BenchDatabase {
  readonly url: string;
  drop(): Promise<void>;
}

/** A fresh database; dropped by `drop()`, or when the benchmark is stopped from outside before that (on-stop.ts). */
export async function createBenchDatabase(): Promise<BenchDatabase> {
  if (!(await postgresReachable())) throw new Error(`PostgreSQL at ${ADMIN_URL} is not reachable`);
  const db = await createTestDatabase();
  const forget = onStop(() => db.drop());
  return {
    url: db.url,
    async drop() {
      forget();
      await db.drop();
    },
  };
}

/** Runs fn with a fresh database, dropped afterwards whatever happens. */
export async function withDatabase<T>(fn: (db: BenchDatabase) => Promise<T>): Promise<T> {
  const db = await createBenchDatabase();
  try {
    return await fn(db);
  } finally {
    await db.drop();
  }
}

// The service keeps timestamps and int8 as text (src/store/db.ts, KEEP_AS_TEXT); the
// baseline parses results the same way so neither pays for a Date.
const KEEP_AS_TEXT = new Set([20, 1082, 1114, 1184]);
const types = {
  getTypeParser: (oid: number, format?: "text" | "binary"): ((value: string) => unknown) =>
    KEEP_AS_TEXT.has(oid) ? (x) => x : (pg.types.getTypeParser(oid, format) as (value: string) => unknown),
};

/**
 * A plain pg client on the database: what the baselines use. It has the
 * session settings of the service's pool (SESSION_OPTIONS): with JIT on, one
 * of the create's recursive checks spent ~200 ms compiling, and the baseline
 * measured the compiler, not the SQL.
 */
export async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, types, options: SESSION_OPTIONS });
  // Dropping the database on a stop from outside ends this connection: expected then, an error otherwise.
  client.on("error", (e) => {
    if (!stopping()) throw e;
  });
  await client.connect();
  return client;
}

/** The PostgreSQL version string, for the report. */
export async function serverVersion(): Promise<string> {
  const c = await connect(ADMIN_URL);
  try {
    const { rows } = await c.query<{ v: string }>("SELECT current_setting('server_version') AS v");
    return rows[0]?.v ?? "?";
  } finally {
    await c.end();
  }
}
