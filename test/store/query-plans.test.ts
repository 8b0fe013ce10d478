// Store internals on one backend kind (PostgreSQL): the common queries use the
// indexes of migration 0002 (and the parent index of 0001) once the tables are
// big enough for it to matter. It lives with the store tests because it tests
// the store's SQL, not a surface.
import { fromJson, create } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { migrate, openDatabase, type Db, pageStatement, planQuery } from "../../src/store/index.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { ALL_GRANTS } from "../../src/access/index.js";
import { explainPlan, planNodes, type PlanNode } from "../support/plans.js";

const reachable = await postgresReachable();

function indexScans(root: PlanNode): string[] {
  return planNodes(root)
    .filter((n) => /Index (Only )?Scan|Bitmap Index Scan/.test(n["Node Type"]) && n["Index Name"])
    .map((n) => `${n["Node Type"]}:${n["Index Name"]}`);
}

describe.skipIf(!reachable)("query plans use the indexes [postgres]", () => {
  let db: Db;
  let testDb: TestDatabase;
  beforeAll(async () => {
    testDb = await createTestDatabase();
    db = await openDatabase({ databaseUrl: testDb.url, poolSize: 2 });
    await migrate(db);
    // 50,000 current rows over 5 types; one chain of parents; CT is rare.
    await db.query(`
      INSERT INTO resources (identifier, payload_type, parent_identifier, access_level, payload, created_at, updated_at, version, actor)
      SELECT 'r' || g, (ARRAY['study','series','file','annotation','dataset'])[1 + g % 5],
             CASE WHEN g > 1 AND g % 1000 <> 0 THEN 'r' || (g / 10) END, 'internal',
             jsonb_build_object('modality', CASE WHEN g % 997 = 0 THEN 'CT' ELSE 'MR' || (g % 50) END, 'name', 'n' || g),
             now() - g * interval '1 second', now(), 2, 'test'
        FROM generate_series(1, 50000) g`);
    // Their history: one superseded version each (the current one is the row above).
    await db.query(`
      INSERT INTO resource_versions (identifier, version, tx_from, tx_to, payload_type, parent_identifier, access_level, payload, created_at, updated_at, actor)
      SELECT identifier, 1, created_at, updated_at, payload_type, parent_identifier, access_level, payload, created_at, created_at, actor FROM resources`);
    await db.exec("ANALYZE resources; ANALYZE resource_versions");
  });
  afterAll(async () => {
    await db?.close();
    await testDb?.drop();
  });

  async function explain(req: MessageInitShape<typeof QueryRequestSchema>): Promise<string[]> {
    const st = pageStatement(planQuery(create(QueryRequestSchema, req)), { kind: "now" }, ALL_GRANTS, { limit: 101 });
    return indexScans(await explainPlan(db, st.sql, st.params));
  }

  it("by payload type, newest first", async () => {
    expect(await explain({ payloadType: "study" })).toContainEqual(
      expect.stringMatching(/Index (Only )?Scan.*:resources_type_created_idx/),
    );
  });

  it("filtered on a payload field", async () => {
    const scans = await explain({
      payloadType: "series",
      filters: [{ field: "modality", op: "eq", value: fromJson(ValueSchema, "CT") }],
    });
    // The GIN index answers the containment; with fresh statistics the
    // planner may instead walk the (payload_type, created_at) index for the
    // LIMIT and filter. Either is an index scan; a sequential scan is not.
    expect(scans, JSON.stringify(scans)).toContainEqual(
      expect.stringMatching(/^(Bitmap )?Index (Only )?Scan:(resources_payload_gin_idx|resources_type_created_idx)$/),
    );
  });

  it("a later page, read at the cursor's pinned point, walks the history in sort order", async () => {
    const st = pageStatement(
      planQuery(create(QueryRequestSchema, { payloadType: "study" })),
      { kind: "pinned", at: "2999-01-01T00:00:00.000000Z" },
      ALL_GRANTS,
      { limit: 101, after: { value: "2999-01-01T00:00:00.000000Z", identifier: "r1" } },
    );
    expect(indexScans(await explainPlan(db, st.sql, st.params))).toContainEqual(
      expect.stringMatching(/Index (Only )?Scan.*:resource_versions_type_created_idx/),
    );
  });

  it("descendants of a resource", async () => {
    const scans = await explain({ parentIdentifier: "r5", includeIndirectParents: true });
    expect(scans).toContainEqual(expect.stringMatching(/Index (Only )?Scan:resources_parent_idx/));
  });
});
