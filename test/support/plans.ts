// The plans the plan tests read: EXPLAIN (FORMAT JSON) of a statement, and
// its nodes in one walk, so each test says only which nodes it counts (a
// sequential scan of a tree table, rows read from the resource tables, scans
// by index, nested loops over transition tables).
import type { Queryable } from "../../src/store/index.js";

/** A node of an EXPLAIN (FORMAT JSON) plan: the fields the tests read. */
export interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  /** With ANALYZE: rows a loop returned, how many loops ran, rows it read and dropped. */
  "Actual Rows"?: number;
  "Actual Loops"?: number;
  "Rows Removed by Filter"?: number;
  "Rows Removed by Index Recheck"?: number;
  Plans?: PlanNode[];
}

/** Every node of the plan, depth first, each node before the nodes under it. */
export function planNodes(node: PlanNode, out: PlanNode[] = []): PlanNode[] {
  out.push(node);
  for (const child of node.Plans ?? []) planNodes(child, out);
  return out;
}

/** The root of the plan PostgreSQL makes for the statement (`analyze`: run it, with the actual rows). */
export async function explainPlan(
  db: Pick<Queryable, "query">,
  sql: string,
  params?: readonly unknown[],
  { analyze = false }: { analyze?: boolean } = {},
): Promise<PlanNode> {
  const { rows } = await db.query<{ "QUERY PLAN": unknown }>(
    `EXPLAIN (${analyze ? "ANALYZE, " : ""}FORMAT JSON) ${sql}`,
    params,
  );
  const raw = rows[0]?.["QUERY PLAN"];
  const doc = (typeof raw === "string" ? JSON.parse(raw) : raw) as [{ Plan?: PlanNode }] | undefined;
  const root = doc?.[0]?.Plan;
  if (!root) throw new Error(`no plan for ${sql}`);
  return root;
}

/** Rows the plan (run with ANALYZE) read from the resource tables: found plus filtered away, at every loop. */
export function rowsRead(root: PlanNode): number {
  return planNodes(root)
    .filter((n) => n["Relation Name"] === "resources" || n["Relation Name"] === "resource_versions")
    .reduce(
      (sum, n) =>
        sum +
        ((n["Actual Rows"] ?? 0) + (n["Rows Removed by Filter"] ?? 0) + (n["Rows Removed by Index Recheck"] ?? 0)) *
          (n["Actual Loops"] ?? 1),
      0,
    );
}
