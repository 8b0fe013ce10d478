// Store internals on PostgreSQL (docs/queries.md): equality and `in` on the
// identifying payload fields go through an index in a store of 100,000, now
// and at an as_of, never a sequential scan of `resources` (or of the
// history) nor a walk of a whole sort-order index filtering every row.
import { fromJson, create, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import {
  countStatement,
  migrate,
  openDatabase,
  pageStatement,
  planQuery,
  type Db,
  type ReadPoint,
} from "../../src/store/index.js";
import { explainPlan, planNodes, type PlanNode } from "../support/plans.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { ALL_GRANTS } from "../../src/access/index.js";

const reachable = await postgresReachable();

/** Every scan of the plan as "<node type>:<relation or index>". */
function scans(root: PlanNode): string[] {
  return planNodes(root)
    .filter((n) => /Scan/.test(n["Node Type"]))
    .map((n) => `${n["Node Type"]}:${n["Index Name"] ?? n["Relation Name"] ?? ""}`);
}

const TOTAL = 100_000;
const value = (v: unknown) => fromJson(ValueSchema, v as never);

describe.skipIf(!reachable)("equality and in filters on identifying payload fields use an index [postgres]", () => {
  let db: Db;
  let testDb: TestDatabase;
  beforeAll(async () => {
    testDb = await createTestDatabase();
    db = await openDatabase({ databaseUrl: testDb.url, poolSize: 2 });
    await migrate(db);
    // 100,000 current rows: files (each its own path and sha256), series (modality), studies (accession, date), patients.
    await db.query(`
      INSERT INTO resources (identifier, payload_type, parent_identifier, access_level, payload, created_at, updated_at, version, actor)
      SELECT 'r' || g, t, NULL, 'internal',
             CASE t WHEN 'file' THEN jsonb_build_object('path', 's3://b/f' || g, 'sha256', md5(g::text) || md5((g + 1)::text), 'size_bytes', '10')
                    WHEN 'series' THEN jsonb_build_object('modality', (ARRAY['CT','MR','US','XA'])[1 + g % 4])
                    WHEN 'study' THEN jsonb_build_object('accession_number', 'A' || g, 'study_date', to_char(date '2020-01-01' + g % 900, 'YYYY-MM-DD'))
                    ELSE jsonb_build_object('datasource_id', 'ds' || (g % 499)) END,
             now() - g * interval '1 second', now(), 2, 'test'
        FROM generate_series(1, ${TOTAL}) g,
             LATERAL (SELECT CASE WHEN g % 100 = 0 THEN 'patient' WHEN g % 100 < 6 THEN 'study' WHEN g % 100 < 26 THEN 'series' ELSE 'file' END AS t) x`);
    // A tenth of the files and series superseded once, every study and patient.
    await db.query(`
      INSERT INTO resource_versions (identifier, version, tx_from, tx_to, payload_type, parent_identifier, access_level, payload, created_at, updated_at, actor)
      SELECT identifier, 1, created_at, updated_at, payload_type, parent_identifier, access_level, payload, created_at, created_at, actor
        FROM resources WHERE right(identifier, 1) = '7' OR payload_type IN ('study', 'patient')`);
    await db.exec("ANALYZE resources; ANALYZE resource_versions");
  });
  afterAll(async () => {
    await db?.close();
    await testDb?.drop();
  });

  async function plan(
    req: MessageInitShape<typeof QueryRequestSchema>,
    point: ReadPoint,
    count = false,
  ): Promise<string[]> {
    const planned = planQuery(create(QueryRequestSchema, req));
    const st = count
      ? countStatement(planned, point, ALL_GRANTS)
      : pageStatement(planned, point, ALL_GRANTS, { limit: 101 });
    return scans(await explainPlan(db, st.sql, st.params));
  }

  const NOW: ReadPoint = { kind: "now" };
  const PAST: ReadPoint = { kind: "as_of", asOf: "2999-01-01T00:00:00Z" };

  /** No sequential scan, and every scan of the resources (or their history) is one of the field's index. */
  function expectIndexed(found: string[], field: string) {
    const text = JSON.stringify(found);
    expect(
      found.filter((s) => /^Seq Scan:resource/.test(s)),
      text,
    ).toEqual([]);
    const indexScans = found.filter((s) => /^(Bitmap )?Index (Only )?Scan:resource/.test(s));
    expect(indexScans.length, text).toBeGreaterThan(0);
    for (const s of indexScans) expect(s, text).toMatch(new RegExp(`:resource(s|_versions)_payload_${field}_idx$`));
  }

  const cases: [string, string, unknown, unknown][] = [
    ["file", "path", "s3://b/f1234", ["s3://b/f1234", "s3://b/f99999", "s3://b/nothing"]],
    ["file", "sha256", "0".repeat(64), ["0".repeat(64), "f".repeat(64)]],
    ["study", "accession_number", "A1203", ["A1203", "A5"]],
    ["study", "study_date", "2020-03-04", ["2020-03-04", "2021-01-01"]],
    ["patient", "datasource_id", "ds3", ["ds3", "ds4"]],
  ];

  for (const [payloadType, field, one, several] of cases) {
    it(`${payloadType}.${field} eq and in, a page and a count, now and at as_of`, async () => {
      for (const point of [NOW, PAST]) {
        expectIndexed(await plan({ payloadType, filters: [{ field, op: "eq", value: value(one) }] }, point), field);
        expectIndexed(await plan({ payloadType, filters: [{ field, op: "in", value: value(several) }] }, point), field);
        expectIndexed(
          await plan({ payloadType, filters: [{ field, op: "eq", value: value(one) }] }, point, true),
          field,
        );
      }
    });
  }

  it("in on a payload field without its own index uses the GIN index or walks the sort order, never a sequential scan", async () => {
    const found = await plan(
      { payloadType: "series", filters: [{ field: "modality", op: "in", value: value(["CT", "NM"]) }] },
      NOW,
    );
    expect(
      found.filter((s) => /^Seq Scan:resource/.test(s)),
      JSON.stringify(found),
    ).toEqual([]);
  });
});
