// The read paths that walk a subtree (children's counts as of a point, and
// descendant queries, now and as of a point) must read about what
// the subtree holds, not the whole table at every step. As plain joins the
// planner hashed a sequential scan of `resources` (or a range scan of the
// whole history) at every step of the recursion: a listing of 10 children
// with 1,000 descendants in a store of 50,000 took 10 ms now and 31 ms as of a
// point, a descendant query 24 and 58 ms (docs/benchmarks/load.md, "Round seven: the documents, and the subtree walks of the reads"). Each walk
// is run here under EXPLAIN ANALYZE and the rows it reads from the resource
// tables are counted, whatever plan the planner picks. Now, children's
// counts and a subtree's count are stored (tree_counts): no walk at all.
import { create } from "@bufbuild/protobuf";
import { expect, it } from "vitest";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import type { NewResource, Queryable, ReadPoint } from "../../src/store/index.js";
import { countStatement, createResourceStore, listChildren, pageStatement, planQuery } from "../../src/store/index.js";
import { describeBackends, uid } from "./backends.js";
import { recording, type Recorded } from "./recording.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";
import { explainPlan, rowsRead, type PlanNode } from "../support/plans.js";

/** The recursive walks of a plan (what runs once per step). */
function walks(node: PlanNode, out: PlanNode[] = []): PlanNode[] {
  if (node["Node Type"] === "Recursive Union") out.push(node);
  else for (const child of node.Plans ?? []) walks(child, out);
  return out;
}

/**
 * Rows the statement's walk read from the resource tables. Only the walk:
 * how the rows it found are then read once is the planner's choice by the
 * table's size (a scan of a small table beats a thousand probes).
 */
async function readsOf(db: Queryable, sql: string, params: readonly unknown[] | undefined): Promise<number> {
  const found = walks(await explainPlan(db, sql, params, { analyze: true }));
  expect(found.length).toBe(1);
  return rowsRead(found[0]!);
}

const node = (identifier: string, parent?: string): NewResource => ({
  identifier,
  payloadType: "annotation",
  ...(parent !== undefined ? { parentIdentifier: parent } : {}),
  payload: { label: "x" },
});

/** A root with 10 children of 99 children each: 1,001 resources, three levels. */
function tree(p: string): NewResource[] {
  const out = [node(p)];
  for (let s = 0; s < 10; s++) out.push(node(`${p}-s${s}`, p));
  for (let s = 0; s < 10; s++) for (let f = 0; f < 99; f++) out.push(node(`${p}-s${s}-f${f}`, `${p}-s${s}`));
  return out;
}

describeBackends("subtree walks of the read paths use the keys", (backend) => {
  it("children's counts and descendant queries read about the subtree, now and as of a point", async () => {
    const { db } = backend();
    const store = createResourceStore(db);
    // Eight trees like the one walked: the table is 8x the subtree.
    const p = uid("walk");
    for (let i = 0; i < 7; i++) await store.create(LOCAL_CALLER, tree(uid("fill")));
    await store.create(LOCAL_CALLER, tree(p));
    await db.exec("ANALYZE resources; ANALYZE resource_versions");
    const { rows } = await db.query<{ at: string }>(
      "SELECT to_char(last AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS at FROM clock",
    );
    const asOf = rows[0]!.at;
    const subtree = 1000;
    const reads: Record<string, number> = {};

    for (const [name, options] of [
      ["children now", {}],
      ["children as of", { asOf }],
    ] as const) {
      const recorded: Recorded[] = [];
      const nodes = await listChildren(recording(db, recorded), ALL_GRANTS, { parentIdentifier: p, ...options });
      expect(nodes.map((n) => n.descendantCount).reduce((a, b) => a + b, 0)).toBe(subtree - 10);
      const walk = recorded.find((r) => /WITH RECURSIVE/.test(r.sql));
      if (name === "children now") {
        expect(walk, "children now read the stored counts").toBeUndefined();
        continue;
      }
      reads[name] = await readsOf(db, walk!.sql, walk!.params);
    }
    const plan = planQuery(create(QueryRequestSchema, { parentIdentifier: p, includeIndirectParents: true }));
    for (const [name, point] of [
      ["query now", { kind: "now" }],
      ["query as of", { kind: "as_of", asOf }],
    ] as [string, ReadPoint][]) {
      const count = countStatement(plan, point, ALL_GRANTS);
      expect((await db.query<{ n: string }>(count.sql, count.params)).rows[0]!.n).toBe(String(subtree));
      if (point.kind === "now") expect(count.sql, "the count of a subtree now is stored").not.toMatch(/RECURSIVE/);
      else reads[`count ${name}`] = await readsOf(db, count.sql, count.params);
      const page = pageStatement(plan, point, ALL_GRANTS, { limit: 101 });
      reads[`page ${name}`] = await readsOf(db, page.sql, page.params);
    }
    // A walk reads each row of the subtree once or twice (the history and
    // the current table as of a point); the whole table is 8,008 rows a step.
    for (const [name, n] of Object.entries(reads))
      expect(n, `${name} read ${n} rows: ${JSON.stringify(reads)}`).toBeLessThan(3 * subtree);
  }, 120_000);
});
