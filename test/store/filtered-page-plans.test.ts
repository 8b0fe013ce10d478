// Store internals on PostgreSQL (issue 40, item 1): a filtered page with a
// limit costs what it returns. In a store of 100,000 (a tenth of them
// series, a quarter of those CT), "series where modality = CT, limit 100"
// reads a bounded prefix of the series' sort order, not every CT series
// (the planner, which cannot see that modality and the payload type are
// correlated, fetched and sorted all 2,500 through the GIN index). A rare
// value still answers from the GIN index, and both give the rows a plain
// ORDER BY gives. EXPLAIN ANALYZE counts rows, never times.
import { create, fromJson, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import { ALL_GRANTS, type Grants } from "../../src/access/index.js";
import { HEAD_WALK_FACTOR, migrate, openDatabase, pageStatement, planQuery, type Db } from "../../src/store/index.js";
import { explainPlan, planNodes, type PlanNode } from "../support/plans.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";

const reachable = await postgresReachable();

/** Rows the plan's scans of `resources` returned, over all loops. */
function rowsRead(root: PlanNode): number {
  return planNodes(root)
    .filter((n) => /Scan/.test(n["Node Type"]) && n["Relation Name"] === "resources")
    .reduce((rows, n) => rows + (n["Actual Rows"] ?? 0) * (n["Actual Loops"] ?? 1), 0);
}

const TOTAL = 100_000;
const LIMIT = 101;
const str = (v: string) => fromJson(ValueSchema, v);

describe.skipIf(!reachable)("a filtered page with a limit reads a bounded prefix of the sort order [postgres]", () => {
  let db: Db;
  let testDb: TestDatabase;
  beforeAll(async () => {
    testDb = await createTestDatabase();
    db = await openDatabase({ databaseUrl: testDb.url, poolSize: 2 });
    await migrate(db);
    // Interleaved as a service writes them: every 1,000 rows a patient, 5 studies, 100 series, 894 files.
    await db.query(`
      INSERT INTO resources (identifier, payload_type, parent_identifier, access_level, payload, created_at, updated_at, version, actor)
      SELECT 'r' || g, t, NULL, CASE WHEN g % 7 = 0 THEN 'restricted' ELSE 'internal' END,
             CASE t WHEN 'file' THEN jsonb_build_object('path', 's3://b/f' || g)
                    WHEN 'series' THEN jsonb_build_object('modality', (ARRAY['CT','MR','US','XA'])[1 + g % 4])
                    WHEN 'study' THEN jsonb_build_object('accession_number', 'A' || g)
                    ELSE jsonb_build_object('datasource_id', 'ds1') END,
             now() - g * interval '1 second', now(), 1, 'test'
        FROM generate_series(1, ${TOTAL}) g,
             LATERAL (SELECT CASE WHEN g % 1000 = 0 THEN 'patient' WHEN g % 1000 < 6 THEN 'study' WHEN g % 1000 < 106 THEN 'series' ELSE 'file' END AS t) x`);
    // A rare modality, three series among the oldest (past any bounded prefix of the newest first).
    await db.query(
      `UPDATE resources SET payload = '{"modality":"PT"}' WHERE identifier IN ('r99010', 'r99011', 'r99012')`,
    );
    await db.exec("VACUUM ANALYZE resources");
  });
  afterAll(async () => {
    await db?.close();
    await testDb?.drop();
  });

  async function page(
    req: MessageInitShape<typeof QueryRequestSchema>,
    grants: Grants,
  ): Promise<{ read: number; ids: string[] }> {
    const st = pageStatement(planQuery(create(QueryRequestSchema, req)), { kind: "now" }, grants, { limit: LIMIT });
    const root = await explainPlan(db, st.sql, st.params, { analyze: true });
    const answer = await db.query<{ identifier: string }>(st.sql, st.params);
    return { read: rowsRead(root), ids: answer.rows.map((r) => r.identifier) };
  }

  /** The same page by a plain statement: every matching series, newest first. */
  async function reference(modality: string, restricted: boolean): Promise<string[]> {
    const { rows } = await db.query<{ identifier: string }>(
      `SELECT identifier FROM resources WHERE NOT is_deleted AND payload_type = 'series' AND payload ->> 'modality' = $1 ${restricted ? "" : "AND access_level <> 'restricted'"}
        ORDER BY created_at DESC, identifier DESC LIMIT ${LIMIT}`,
      [modality],
    );
    return rows.map((r) => r.identifier);
  }

  const internalOnly: Grants = { datasources: "all", clearance: "internal" };

  it("modality = CT, limit 101: the rows of a plain ORDER BY, reading at most the bounded prefix (not all 2,500 CT series)", async () => {
    for (const [who, grants, restricted] of [
      ["everything", ALL_GRANTS, true],
      ["internal clearance", internalOnly, false],
    ] as const) {
      const { read, ids } = await page(
        { payloadType: "series", filters: [{ field: "modality", op: "eq", value: str("CT") }] },
        grants,
      );
      expect(ids, who).toEqual(await reference("CT", restricted));
      expect(ids.length, who).toBe(LIMIT);
      expect(read, who).toBeLessThanOrEqual(LIMIT * HEAD_WALK_FACTOR);
    }
  });

  it("a rare value (3 old series) falls back to the GIN index: the rows of a plain ORDER BY, reading the prefix and the few matches", async () => {
    const { read, ids } = await page(
      { payloadType: "series", filters: [{ field: "modality", op: "eq", value: str("PT") }] },
      ALL_GRANTS,
    );
    expect(ids).toEqual(await reference("PT", true));
    expect(ids).toHaveLength(3);
    expect(read).toBeLessThanOrEqual(LIMIT * HEAD_WALK_FACTOR + 3);
  });

  it("in over two values reads a bounded prefix too", async () => {
    const { read, ids } = await page(
      { payloadType: "series", filters: [{ field: "modality", op: "in", value: fromJson(ValueSchema, ["CT", "PT"]) }] },
      ALL_GRANTS,
    );
    expect(ids).toHaveLength(LIMIT);
    expect(read).toBeLessThanOrEqual(LIMIT * HEAD_WALK_FACTOR);
  });
});
