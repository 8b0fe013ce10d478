// The write triggers on `resources` cost what a statement writes, whatever
// came before it on the connection (docs/lineage.md, "Tree counts"):
// - every trigger is a statement trigger: a row trigger on a bulk INSERT ...
//   SELECT (a restore, a load) upserted one counts row per row, and 100,000
//   rows took minutes, each updating the same group's row again;
// - a statement joining the OLD and NEW transition tables is planned for the
//   rows it has: PL/pgSQL keeps a static statement's first plan, so a plan
//   made for a one-row update (a nested loop over the two tables) served a
//   3,000-row update, quadratic (4 s; 10,000 rows a minute). auto_explain,
//   sending every nested plan to the client as a notice, shows each plan the
//   big update ran.
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { expect, it } from "vitest";
import { LOCAL_CALLER } from "../../src/access/index.js";
import { migrate, openDatabase } from "../../src/store/index.js";
import { planNodes, type PlanNode } from "../support/plans.js";
import { createTestDatabase } from "../support/postgres.js";
import { describeBackends } from "./backends.js";

const run = promisify(execFile);

/** The nested loops in a plan whose two inputs are both transition tables. */
function tuplestoreLoops(root: PlanNode): PlanNode[] {
  return planNodes(root).filter(
    (n) =>
      n["Node Type"] === "Nested Loop" &&
      (n.Plans ?? []).length === 2 &&
      n.Plans!.every((p) => p["Node Type"] === "Named Tuplestore Scan"),
  );
}

describeBackends(
  "the write triggers on resources",
  (backend) => {
    it("are statement triggers, never one call per row", async () => {
      const { db } = backend();
      const { rows } = await db.query<{ name: string; per_row: boolean }>(
        `SELECT tgname AS name, (tgtype & 1) = 1 AS per_row FROM pg_trigger WHERE tgrelid = 'resources'::regclass AND NOT tgisinternal ORDER BY tgname`,
      );
      expect(rows.length).toBeGreaterThan(0);
      expect(rows.filter((r) => r.per_row).map((r) => r.name)).toEqual([]);
    });

    it("join the transition tables by hash for a big update that follows a one-row update on the same connection", async () => {
      const { db, store, url } = backend();
      await store.create(LOCAL_CALLER, [{ identifier: "tp-ds", payloadType: "datasource", payload: { name: "tp" } }]);
      await store.create(LOCAL_CALLER, [
        { identifier: "tp-p", payloadType: "patient", parentIdentifier: "tp-ds", payload: { datasource_id: "tp-ds" } },
        ...Array.from({ length: 3000 }, (_, i) => ({
          identifier: `tp-s${i}`,
          payloadType: "study",
          parentIdentifier: "tp-p",
          payload: { modality: "CT" },
        })),
      ]);
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        const plans: { Plan: PlanNode; "Query Text": string }[] = [];
        let collecting = false;
        client.on("notice", (n) => {
          if (!collecting || !n.message?.includes('"Plan"')) return;
          const text = n.message.slice(n.message.indexOf("{"));
          plans.push(JSON.parse(text) as { Plan: PlanNode; "Query Text": string });
        });
        await client.query("LOAD 'auto_explain'");
        await client.query(
          "SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; SET auto_explain.log_format = json; SET auto_explain.log_level = notice",
        );
        // One row first: every trigger's statements run, and plan, for one row.
        await client.query(`UPDATE resources SET payload = '{"n":1}' WHERE identifier = 'tp-s0'`);
        await client.query(`UPDATE resources SET parent_identifier = 'tp-ds' WHERE identifier = 'tp-s1'`);
        collecting = true;
        // Then 3,000 rows on the same connection: a payload edit, then a move.
        await client.query(`UPDATE resources SET payload = '{"n":2}' WHERE parent_identifier = 'tp-p'`);
        await client.query(`UPDATE resources SET parent_identifier = 'tp-ds' WHERE parent_identifier = 'tp-p'`);
        collecting = false;
        const joined = plans.filter(
          (p) => /superseded|replacing/.test(p["Query Text"]) && /JOIN/i.test(p["Query Text"]),
        );
        expect(joined.length).toBeGreaterThan(0);
        for (const p of joined) expect(tuplestoreLoops(p.Plan), p["Query Text"].slice(0, 200)).toEqual([]);
      } finally {
        await client.end();
      }
      // The counts followed: the patient lost its 2,999 studies to the datasource.
      const { rows } = await db.query<{ node: string; children: string }>(
        `SELECT node, sum(children)::text AS children FROM tree_counts WHERE node IN ('tp-p', 'tp-ds') GROUP BY node ORDER BY node`,
      );
      expect(rows).toEqual([
        { node: "tp-ds", children: "3001" },
        { node: "tp-p", children: "0" },
      ]);
    });

    // pg_restore empties search_path before it loads rows: a trigger that
    // named its tables unqualified failed the restore (relation "tree_counts"
    // does not exist). Each trigger function carries the store's schema.
    it("run under pg_restore's empty search_path: a data-only restore into a migrated store keeps the counts", async () => {
      const { db, store, url } = backend();
      await store.create(LOCAL_CALLER, [
        { identifier: "pr-ds", payloadType: "datasource", payload: { name: "pr" } },
        { identifier: "pr-p", payloadType: "patient", parentIdentifier: "pr-ds", payload: { datasource_id: "pr-ds" } },
        { identifier: "pr-s", payloadType: "study", parentIdentifier: "pr-p", payload: { modality: "MR" } },
      ]);
      const dir = await mkdtemp(join(tmpdir(), "rs-pg-restore-"));
      const target = await createTestDatabase();
      try {
        const file = join(dir, "store.pgdump");
        const tables = ["resources", "resource_versions", "resource_attribution"].flatMap((t) => ["-t", t]);
        await run("pg_dump", ["--format=custom", "--data-only", ...tables, "-f", file, "-d", url!]);
        const restored = await openDatabase({ databaseUrl: target.url, poolSize: 1 });
        try {
          await migrate(restored);
          await run("pg_restore", ["--data-only", "--single-transaction", "-d", target.url, file]);
          // A group whose count went back to zero keeps its row; a restore writes none: the same numbers.
          const counts = (d: typeof db) =>
            d.query<{ row: string }>(
              `SELECT row::text FROM (
                 SELECT to_jsonb(t) AS row FROM tree_counts t WHERE children <> 0 OR descendants <> 0
                 UNION ALL SELECT to_jsonb(c) FROM datasource_counts c WHERE resources <> 0) x ORDER BY 1`,
            );
          const [before, after] = await Promise.all([counts(db), counts(restored)]);
          expect(before.rows.length).toBeGreaterThan(0);
          expect(after.rows).toEqual(before.rows);
        } finally {
          await restored.close();
        }
      } finally {
        await target.drop();
        await rm(dir, { recursive: true, force: true });
      }
    });
  },
  ["postgres"],
);
