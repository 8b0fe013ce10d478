// DATABASE_STATEMENT_TIMEOUT_MS and DATABASE_IDLE_IN_TRANSACTION_MS
// (docs/contract/16-limits.md): every PostgreSQL pool connection carries
// them, so no statement and no open transaction holds a connection forever.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { openDatabase, type Db } from "../../src/store/index.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";

const reachable = await postgresReachable();

describe.runIf(reachable)("PostgreSQL pool session timeouts", () => {
  let tdb: TestDatabase;
  let db: Db;
  beforeAll(async () => {
    tdb = await createTestDatabase();
    const config = loadConfig({
      DATABASE_URL: tdb.url,
      DATABASE_STATEMENT_TIMEOUT_MS: "4321",
      DATABASE_IDLE_IN_TRANSACTION_MS: "1234",
    });
    db = await openDatabase({
      databaseUrl: tdb.url,
      poolSize: 2,
      statementTimeoutMs: config.defence.databaseStatementTimeoutMs,
      idleInTransactionMs: config.defence.databaseIdleInTransactionMs,
    });
  });
  afterAll(async () => {
    await db?.close();
    await tdb?.drop();
  });

  it("SHOWs the configured timeouts on pool connections, inside and outside a transaction", async () => {
    const show = async (q: Pick<Db, "query">) => ({
      statement: (await q.query<{ statement_timeout: string }>("SHOW statement_timeout")).rows[0]?.statement_timeout,
      idle: (await q.query<{ idle_in_transaction_session_timeout: string }>("SHOW idle_in_transaction_session_timeout"))
        .rows[0]?.idle_in_transaction_session_timeout,
    });
    const expected = { statement: "4321ms", idle: "1234ms" };
    expect(await show(db)).toEqual(expected);
    await db.transaction(async (tx) => {
      expect(await show(tx)).toEqual(expected);
    });
  });

  it("ends a statement that runs past the statement timeout", async () => {
    await expect(db.query("SELECT pg_sleep(10)")).rejects.toThrow();
  });
});
