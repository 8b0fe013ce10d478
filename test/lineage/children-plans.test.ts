// A children listing (docs/lineage.md) costs what it holds. In a store of about
// 100,000 resources (built here with set-based SQL: a datasource, 50
// patients, each with 5 studies of 4 series of 100 files) the statements a
// listing of a small node sends, now, for a caller who sees everything and
// for a restricted one, read only by key: EXPLAIN shows no sequential scan
// of `resources`, of the history or of the stored tree counts. (The lineage
// view they replace was joined by a scan of the whole closure.) In the same
// store, statistics at a past as_of for a caller with narrower grants read
// the log of counts and the few resources changed since the point, never
// the whole history (docs/scaling.md).
import { expect, it } from "vitest";
import { ALL_GRANTS, LOCAL_CALLER, type Grants } from "../../src/access/index.js";
import { datasourceStats, listChildren, openDatabase } from "../../src/store/index.js";
import { describeBackends } from "../store/backends.js";
import { recording, type Recorded } from "../store/recording.js";
import { explainPlan, planNodes, type PlanNode } from "../support/plans.js";

const TREE_TABLES = new Set(["resources", "resource_versions", "tree_counts", "resource_attribution"]);

function seqScans(root: PlanNode): string[] {
  return planNodes(root)
    .filter((n) => n["Node Type"] === "Seq Scan" && TREE_TABLES.has(n["Relation Name"] ?? ""))
    .map((n) => n["Relation Name"]!);
}

/** The hospital tree, level by level, one INSERT ... SELECT each (the write triggers keep the counts, set-based). */
const BUILD = [
  `INSERT INTO resources (identifier, payload_type, parent_identifier, access_level, payload, created_at, updated_at, version, actor, datasource_id)
   SELECT 'big-ds', 'datasource', NULL, 'public', '{"name":"big"}', now(), now(), 1, 'test', 'big-ds'`,
  `INSERT INTO resources (identifier, payload_type, parent_identifier, access_level, payload, created_at, updated_at, version, actor, datasource_id)
   SELECT 'big-p' || p, 'patient', 'big-ds', 'internal', '{"datasource_id":"big-ds","sex":"female","birth_year":1970}', now(), now(), 1, 'test', 'big-ds'
     FROM generate_series(1, 50) p`,
  `INSERT INTO resources (identifier, payload_type, parent_identifier, access_level, payload, created_at, updated_at, version, actor, datasource_id)
   SELECT 'big-p' || p || '-s' || s, 'study', 'big-p' || p, 'internal', '{"modality":"CT"}', now(), now(), 1, 'test', 'big-ds'
     FROM generate_series(1, 50) p, generate_series(1, 5) s`,
  `INSERT INTO resources (identifier, payload_type, parent_identifier, access_level, payload, created_at, updated_at, version, actor, datasource_id)
   SELECT 'big-p' || p || '-s' || s || '-e' || e, 'series', 'big-p' || p || '-s' || s, 'internal', '{"modality":"CT"}', now(), now(), 1, 'test', 'big-ds'
     FROM generate_series(1, 50) p, generate_series(1, 5) s, generate_series(1, 4) e`,
  `INSERT INTO resources (identifier, payload_type, parent_identifier, access_level, payload, created_at, updated_at, version, actor, datasource_id)
   SELECT 'big-p' || p || '-s' || s || '-e' || e || '-f' || f, 'file', 'big-p' || p || '-s' || s || '-e' || e, CASE WHEN f % 10 = 0 THEN 'restricted' ELSE 'internal' END,
          jsonb_build_object('path', 'big/' || p || '/' || s || '/' || e || '/' || f, 'size_bytes', f), now(), now(), 1, 'test', 'big-ds'
     FROM generate_series(1, 50) p, generate_series(1, 5) s, generate_series(1, 4) e, generate_series(1, 100) f`,
  // Each resource's attribution period, as the writes open them.
  `INSERT INTO resource_attribution (identifier, datasource_id, tx_from, tx_to)
   SELECT identifier, datasource_id, created_at, 'infinity' FROM resources WHERE identifier LIKE 'big-%'`,
];

const CALLERS: [string, Grants][] = [
  ["everything", ALL_GRANTS],
  ["one datasource, internal", { datasources: new Set(["big-ds"]), clearance: "internal" }],
];

describeBackends(
  "children listings read by key (issue 40)",
  (backend) => {
    it("a small node's listing in a store of 100,000 scans no table of the tree, now", async () => {
      const { db, store } = backend();
      for (const sql of BUILD) await db.exec(sql);
      // A small node written through the store: a study with three series, one of them holding two files.
      await store.create(LOCAL_CALLER, [
        {
          identifier: "small-st",
          payloadType: "study",
          parentIdentifier: "big-p7",
          accessLevel: "internal",
          payload: { modality: "MR" },
        },
        ...[1, 2, 3].map((i) => ({
          identifier: `small-se${i}`,
          payloadType: "series",
          parentIdentifier: "small-st",
          accessLevel: "internal",
          payload: { modality: "MR" },
        })),
        ...[1, 2].map((i) => ({
          identifier: `small-f${i}`,
          payloadType: "file",
          parentIdentifier: "small-se1",
          accessLevel: i === 2 ? "restricted" : "internal",
          payload: { path: `s3://bucket/small/${i}` },
        })),
      ]);
      await db.exec("ANALYZE resources; ANALYZE resource_versions; ANALYZE tree_counts");
      const { rows: size } = await db.query<{ n: string }>("SELECT count(*)::text AS n FROM resources");
      expect(Number(size[0]!.n)).toBeGreaterThan(100_000);

      for (const [who, grants] of CALLERS) {
        const recorded: Recorded[] = [];
        const nodes = await listChildren(recording(db, recorded), grants, { parentIdentifier: "small-st" });
        const restricted = grants.clearance !== "restricted";
        expect(
          nodes.map((n) => [n.identifier, n.childCount, n.descendantCount]),
          who,
        ).toEqual([
          ["small-se1", restricted ? 1 : 2, restricted ? 1 : 2],
          ["small-se2", 0, 0],
          ["small-se3", 0, 0],
        ]);
        // The counts of a big node come from the same stored rows: a patient's 5 studies, 2,025 below it.
        const big = await listChildren(db, grants, { parentIdentifier: "big-ds" });
        expect(big.find((n) => n.identifier === "big-p1")?.descendantCount, who).toBe(restricted ? 2025 - 200 : 2025);
        expect(recorded.length, who).toBeGreaterThan(0);
        for (const r of recorded) {
          expect(seqScans(await explainPlan(db, r.sql, r.params)), `${who}: ${r.sql}`).toEqual([]);
        }
      }
    }, 180_000);

    // Named (prepared), the listing was planned once for every parent after
    // ten calls on a 500-child parent; that generic plan listed a 5,000-child
    // datasource 40 times slower than a plan for its value (700 ms, not 17).
    it("a listing is planned for its parent: never a prepared statement's generic plan", async () => {
      const { url } = backend();
      const one = await openDatabase({ databaseUrl: url!, poolSize: 1 });
      try {
        for (let i = 0; i < 10; i++) await listChildren(one, ALL_GRANTS, { parentIdentifier: "small-st" });
        // Sent unnamed, the statement is planned with its parent's value on every call; a prepared one
        // may switch to its generic plan (it did after ten calls on a 500-child parent).
        const { rows } = await one.query<{ name: string }>(
          "SELECT name FROM pg_prepared_statements WHERE statement LIKE '%parent_ok AS%'",
        );
        expect(rows).toEqual([]);
      } finally {
        await one.close();
      }
    });

    it("statistics at a past as_of for a narrow caller subtract what changed since, reading no table whole", async () => {
      const { db, store } = backend();
      const { rows: built } = await db.query<{ n: string }>("SELECT count(*)::text AS n FROM resources");
      if (Number(built[0]!.n) < 100_000) for (const sql of BUILD) await db.exec(sql);
      const narrow: Grants = { datasources: new Set(["big-ds"]), clearance: "internal" };
      const { rows: clock } = await db.query<{ at: string }>(
        `SELECT to_char(last AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at FROM clock`,
      );
      const point = clock[0]!.at;
      const before = await datasourceStats(db, narrow, { asOf: point, datasourceId: "big-ds" });
      // After the point, three internal files are raised to restricted: hidden at the point too (the stricter of the two).
      const raised = ["big-p3-s1-e1-f1", "big-p3-s1-e1-f2", "big-p9-s2-e3-f7"];
      await store.update(
        LOCAL_CALLER,
        raised.map((id) => [id, { accessLevel: "restricted" }]),
      );
      await db.exec("ANALYZE resources; ANALYZE resource_versions; ANALYZE resource_attribution");
      const recorded: Recorded[] = [];
      const [then] = await datasourceStats(recording(db, recorded), narrow, { asOf: point, datasourceId: "big-ds" });
      const [now] = await datasourceStats(db, narrow, { datasourceId: "big-ds" });
      expect(then!.resources).toBe(before[0]!.resources - raised.length);
      expect(then!.byPayloadType["file"]).toBe(now!.byPayloadType["file"]);
      expect(then!.resources).toBe(now!.resources);
      expect(recorded.length).toBeGreaterThan(0);
      for (const r of recorded) expect(seqScans(await explainPlan(db, r.sql, r.params)), r.sql).toEqual([]);
    }, 180_000);
  },
  ["postgres"],
);
