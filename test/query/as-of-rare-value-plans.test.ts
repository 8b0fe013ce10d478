// A filter on a payload field with few matches, at a past as_of, costs its
// matches, not the versions the store held at the point (docs/scaling.md).
// Now, such a filter reads the GIN index on `resources.payload`; at a point,
// the versions active then are partly in `resource_versions` (those
// replaced since), which had no such index: the page walked every version
// of the type active at the point and filtered each (20,000 read here).
// Migration 0029 gives the versions the same GIN index.
// Here: 20,000 series at the point, four of them PT, every one updated
// after it (so what was active at the point is in `resource_versions`);
// EXPLAIN ANALYZE of the page and of the count at the point reads a few
// dozen rows of the resource tables, whatever plan the planner picks, on
// PostgreSQL and on the embedded store.
import { expect, it } from "vitest";
import { fromJson } from "@bufbuild/protobuf";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";
import { countStatement, pageStatement, planQuery } from "../../src/store/index.js";
import { describeBackends } from "../store/backends.js";
import { explainPlan, rowsRead } from "../support/plans.js";

describeBackends("a rare value at a past as_of", (backend) => {
  it("reads its matches, not every version of the type active at the point", async () => {
    const { db, store } = backend();
    await store.create(LOCAL_CALLER, [{ identifier: "arv-ds", payloadType: "datasource", payload: { name: "d" } }]);
    await db.exec(`
        INSERT INTO resources (identifier, payload_type, parent_identifier, access_level, payload, created_at, updated_at, version, actor, datasource_id)
        SELECT 'arv-' || n, 'series', 'arv-ds', 'internal',
               jsonb_build_object('modality', CASE WHEN n % 6000 = 1 THEN 'PT' ELSE (ARRAY['CT','MR'])[1 + n % 2] END),
               clock_timestamp(), clock_timestamp(), 1, 'test', NULL
          FROM generate_series(1, 20000) n;
        UPDATE clock SET last = greatest(last, clock_timestamp());`);
    const { rows: clock } = await db.query<{ at: string }>(
      `SELECT to_char(last AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at FROM clock`,
    );
    const point = clock[0]!.at;
    // After the point every series is rewritten: its version of the point moves to resource_versions.
    await db.exec(`
        UPDATE resources SET payload = payload || '{"body_part": "CHEST"}', version = version + 1,
                             updated_at = clock_timestamp() + interval '1 second'
         WHERE payload_type = 'series';
        UPDATE clock SET last = greatest(last, clock_timestamp() + interval '1 second');
        ANALYZE resources; ANALYZE resource_versions;`);
    const { rows: moved } = await db.query<{ n: string }>(
      "SELECT count(*)::text AS n FROM resource_versions WHERE payload_type = 'series'",
    );
    expect(moved[0]?.n).toBe("20000");
    const plan = planQuery(
      fromJson(QueryRequestSchema, {
        payload_type: "series",
        filters: [{ field: "modality", op: "eq", value: "PT" }],
      }),
    );
    const at = { kind: "as_of", asOf: point } as const;
    const page = pageStatement(plan, at, ALL_GRANTS, { limit: 101 });
    const { rows } = await db.query<{ identifier: string }>(page.sql, page.params);
    expect(rows.map((r) => r.identifier).sort()).toEqual(["arv-1", "arv-12001", "arv-18001", "arv-6001"]);
    const count = countStatement(plan, at, ALL_GRANTS);
    const { rows: n } = await db.query<{ n: string }>(count.sql, count.params);
    expect(n[0]?.n).toBe("4");
    for (const { sql, params } of [page, count]) {
      const read = rowsRead(await explainPlan(db, sql, params, { analyze: true }));
      expect(read).toBeLessThan(100);
    }
  }, 120_000);
});
