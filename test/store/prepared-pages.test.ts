// A query's page statement is sent as a named prepared statement on
// PostgreSQL, so the server parses and analyses each query shape once per
// connection, not on every page (docs/benchmarks/load.md, "Round eight"); the names are
// bounded, so a client inventing shapes cannot grow them without end.
import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import {
  createQueryEngine,
  createStatementNames,
  datasourceStats,
  listChildren,
  MAX_PREPARED_PAGES,
  migrate,
  openDatabase,
  pageStatement,
  planQuery,
  type Db,
} from "../../src/store/index.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { ALL_GRANTS } from "../../src/access/index.js";

const pgOk = await postgresReachable();

describe.skipIf(!pgOk)("query pages as prepared statements [postgres]", () => {
  let testDb: TestDatabase;
  let db: Db;

  beforeAll(async () => {
    testDb = await createTestDatabase();
    // One connection: the statements prepared on it are the ones the pages used.
    db = await openDatabase({ databaseUrl: testDb.url, poolSize: 1 });
    await migrate(db);
  });

  afterAll(async () => {
    await db.close();
    await testDb.drop();
  });

  it("prepares a page's statement once and runs it again by name", async () => {
    const engine = createQueryEngine(db, { cursorSecret: "a-test-secret-of-enough-length-0123456789" });
    const plan = planQuery(
      create(QueryRequestSchema, { payloadType: "file", sortBy: "created_at", sortOrder: "desc", limit: 20 }),
    );
    const sql = pageStatement(plan, { kind: "now" }, ALL_GRANTS, { limit: 21 }).sql;
    for (let i = 0; i < 3; i++) expect((await engine.page(plan, ALL_GRANTS, { limit: 20 })).resources).toEqual([]);
    const name = db.statementNames?.nameOf(sql);
    expect(name).toBeDefined();
    const { rows } = await db.query<{ name: string; runs: string }>(
      "SELECT name, (generic_plans + custom_plans)::text AS runs FROM pg_prepared_statements WHERE statement = $1",
      [sql],
    );
    expect(rows).toEqual([{ name, runs: "3" }]);
  });

  it("prepares the statistics' statements, and sends the tree listing unnamed (its plan hinges on the parent)", async () => {
    for (let i = 0; i < 3; i++) {
      expect(await listChildren(db, ALL_GRANTS, { parentIdentifier: null })).toEqual([]);
      expect(await datasourceStats(db, ALL_GRANTS)).toEqual([]);
    }
    const { rows } = await db.query<{ kind: string; runs: string }>(
      `SELECT CASE WHEN statement LIKE '%AS fresh%' THEN 'fresh' WHEN statement LIKE '%parent_ok AS%' THEN 'children' WHEN statement LIKE '%WITH listed AS%' THEN 'stats' END AS kind,
              (generic_plans + custom_plans)::text AS runs
         FROM pg_prepared_statements WHERE statement ~ 'AS fresh|parent_ok AS|WITH listed AS' ORDER BY 1`,
    );
    // The empty store's statistics list no datasource, so their second statement is not sent. The
    // listing is never prepared: a prepared one fell to a generic plan that listed a 5,000-child parent
    // 40 times slower (test/lineage/children-plans.test.ts).
    expect(rows).toEqual([{ kind: "stats", runs: "3" }]);
  });

  it("names no more than MAX_PREPARED_PAGES texts", () => {
    const names = createStatementNames();
    const texts = Array.from({ length: MAX_PREPARED_PAGES + 5 }, (_, i) => `SELECT ${i} AS shape_${i}`);
    for (const t of texts) names.page(t);
    const named = texts.filter((t) => names.nameOf(t) !== undefined);
    expect(named).toEqual(texts.slice(0, MAX_PREPARED_PAGES));
    for (const t of texts.slice(MAX_PREPARED_PAGES)) expect(names.nameOf(t)).toBeUndefined();
    // A text named once stays named: a connection that prepared it keeps running it by that name.
    for (const t of named) expect(names.nameOf(names.page(t))).toBeDefined();
  });

  it("each opened database names its own shapes: one that used up its names leaves another's untouched", async () => {
    const other = await openDatabase({ databaseUrl: testDb.url, poolSize: 1 });
    try {
      for (let i = 0; i < MAX_PREPARED_PAGES + 1; i++) other.statementNames?.page(`SELECT ${i} AS other_${i}`);
      const fresh = "SELECT 1 AS a_shape_of_the_first_database";
      expect(db.statementNames?.nameOf(db.statementNames.page(fresh))).toBeDefined();
      expect(other.statementNames?.nameOf(other.statementNames.page(fresh))).toBeUndefined();
    } finally {
      await other.close();
    }
  });
});
