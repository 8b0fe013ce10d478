// The baselines send the SAME SQL as the store. Rather than copy the
// statements (and drift), the store's own code runs against a recording Db:
// every statement and its parameters are kept, with answers just good
// enough for the store to carry on (the clock stamp, one RETURNING row per
// input row, no parent problems). A change to the store's SQL changes the
// baseline with it; a change to its control flow fails here loudly.
import type pg from "pg";
import { SNAPSHOT_BEGIN, type Db, type Queryable } from "../../src/store/index.js";

export interface Statement {
  readonly sql: string;
  readonly params: unknown[] | undefined;
}

const STAMP = "2026-01-01T00:00:00.000000Z";

function answer(sql: string, params: readonly unknown[] | undefined): unknown[] {
  if (/UPDATE clock/i.test(sql)) return [{ at: STAMP }];
  // The create INSERT ... RETURNING: one row per input row means "none was active".
  if (/RETURNING r\.identifier/.test(sql) && typeof params?.[0] === "string") {
    return (JSON.parse(params[0]) as { identifier: string }[]).map((r) => ({ identifier: r.identifier }));
  }
  return [];
}

/** Runs `fn` (a store operation) on a Db that only records; returns the statements of its transaction. */
export async function captureStatements(
  fn: (db: Db) => Promise<unknown>,
  /** Rows for a statement the default answers cannot satisfy; undefined = the default. */
  override?: (sql: string) => unknown[] | undefined,
): Promise<Statement[]> {
  const statements: Statement[] = [];
  const tx: Queryable = {
    query<R>(sql: string, params?: readonly unknown[]) {
      statements.push({ sql, params: params ? [...params] : undefined });
      return Promise.resolve({ rows: (override?.(sql) ?? answer(sql, params)) as R[] });
    },
    exec(sql: string) {
      statements.push({ sql, params: undefined });
      return Promise.resolve();
    },
  };
  const db: Db = {
    kind: "postgres",
    capabilities: { streamedBatches: true, listen: false, embedded: false },
    ...tx,
    // A read snapshot is part of what the call sends, framing included;
    // write transactions are framed by the replaying baselines themselves.
    transaction: async (body, options) => {
      if (options?.readOnlySnapshot !== true) return body(tx);
      statements.push({ sql: SNAPSHOT_BEGIN, params: undefined });
      const result = await body(tx);
      statements.push({ sql: "COMMIT", params: undefined });
      return result;
    },
    ping: async () => {},
    close: async () => {},
  };
  await fn(db);
  return statements;
}

/** One transaction a batch, every statement as the store sends it. */
export async function replay(client: pg.Client, statements: readonly Statement[]): Promise<void> {
  await client.query("BEGIN");
  try {
    for (const s of statements) await client.query(s.sql, s.params);
    await client.query("COMMIT");
  } catch (err) {
    await client.query("ROLLBACK");
    throw err;
  }
}
