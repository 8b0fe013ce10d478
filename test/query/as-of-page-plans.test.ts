// A filtered page at a past as_of costs what the store held then, not what
// it holds now (docs/scaling.md). Its default order is created_at
// descending, and a version active at the point was created at or before
// it, so the page's walk of the type's creation order starts at the point
// (`created_at <= t`, which every such version meets) instead of at the
// newest resource. Without that bound, at a point early in the store's
// history, the walk (or a bitmap of every match the store ever held) read
// every series created since: 496 ms for a modality filter at 20M
// (BENCHMARKS.md, scale at 20M).
// Here: ten series at the point, then 20,000 more (set-based SQL, after
// it); EXPLAIN ANALYZE of the page at the point reads a few dozen rows of
// the resource tables, whatever plan PostgreSQL picks.
import { expect, it } from "vitest";
import { fromJson } from "@bufbuild/protobuf";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";
import { pageStatement, planQuery } from "../../src/store/index.js";
import { describeBackends } from "../store/backends.js";
import { explainPlan, rowsRead } from "../support/plans.js";

describeBackends(
  "a filtered page at a past as_of",
  (backend) => {
    it("reads what existed at the point, not what was created since", async () => {
      const { db, store } = backend();
      await store.create(LOCAL_CALLER, [
        { identifier: "apg-ds", payloadType: "datasource", payload: { name: "d" } },
        ...Array.from({ length: 10 }, (_, i) => ({
          identifier: `apg-early-${i}`,
          payloadType: "series",
          parentIdentifier: "apg-ds",
          payload: { modality: i % 2 === 0 ? "CT" : "MR" },
        })),
      ]);
      const { rows: clock } = await db.query<{ at: string }>(
        `SELECT to_char(last AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at FROM clock`,
      );
      const point = clock[0]!.at;
      // After the point: 20,000 series, a quarter of them CT.
      await db.exec(`
        INSERT INTO resources (identifier, payload_type, parent_identifier, access_level, payload, created_at, updated_at, version, actor, datasource_id)
        SELECT 'apg-late-' || n, 'series', 'apg-ds', 'internal', jsonb_build_object('modality', (ARRAY['CT','MR','US','XA'])[1 + n % 4]),
               clock_timestamp() + interval '1 second', clock_timestamp() + interval '1 second', 1, 'test', NULL
          FROM generate_series(1, 20000) n;
        ANALYZE resources; ANALYZE resource_versions;`);
      const plan = planQuery(
        fromJson(QueryRequestSchema, {
          payload_type: "series",
          filters: [{ field: "modality", op: "eq", value: "CT" }],
        }),
      );
      const { sql, params } = pageStatement(plan, { kind: "as_of", asOf: point }, ALL_GRANTS, { limit: 101 });
      const { rows } = await db.query<{ identifier: string }>(sql, params);
      expect(rows.map((r) => r.identifier).sort()).toEqual([0, 2, 4, 6, 8].map((i) => `apg-early-${i}`));
      const read = rowsRead(await explainPlan(db, sql, params, { analyze: true }));
      expect(read).toBeLessThan(100);
    }, 120_000);
  },
  ["postgres"],
);
