// The resource tree: children with their counts, and ancestor chains, now or
// at an as_of read point. Each answer is one statement (or one snapshot), so
// the parent check, the listing and the counts agree.
//
// "Active descendants" are those reachable through active resources only: a
// walk stops at a tombstone, as /children does and as a cascading delete does.
import type { JsonObject } from "@bufbuild/protobuf";
import { ALL_GRANTS, seesEverything, type Grants } from "../access/index.js";
import { failedPrecondition, notFound } from "../errors.js";
import { checkIdentifier } from "../schema/validate.js";
import type { Db } from "./db.js";
import { named, prepared } from "./prepared.js";
import { ts } from "./sql.js";
import { andVisible, visibleAt, visibleNow } from "./visibility.js";

export interface TreeNodeRow {
  identifier: string;
  payloadType: string;
  parentIdentifier: string | null;
  createdAt: string;
  childCount: number;
  descendantCount: number;
  /** Only when asked for: the proto3 JSON of the payload. */
  payload?: JsonObject;
}

export interface ChildrenOptions {
  /** Roots (resources with no parent) when null or absent. */
  readonly parentIdentifier?: string | null;
  readonly withPayloads?: boolean;
  /** A checked read point (rpc/as-of.ts); now when absent. */
  readonly asOf?: string;
  /** More children than this: failed_precondition (MAX_CHILDREN). */
  readonly maxChildren?: number;
}

const DEFAULT_MAX_CHILDREN = 10_000;

/**
 * Where rows come from: the current table, or the versions live at the read
 * point. `p` is the read point CTE (least(as_of, committed clock), as every
 * as_of read takes it).
 */
interface Source {
  readonly table: string;
  /** The row is the state at the read point (tombstoned or not). */
  at(alias: string): string;
  /** ...and active. */
  live(alias: string): string;
  readonly with: string;
  /** The caller may see the row (docs/contract/18-access.md); undefined when its grants see everything. */
  visible(grants: Grants, alias: string): string | undefined;
}

const CURRENT: Source = {
  table: "resources",
  at: () => "true",
  live: (a) => `NOT ${a}.is_deleted`,
  with: "",
  visible: visibleNow,
};

function asOfSource(param: string): Source {
  const at = (a: string) => `${a}.tx_from <= (SELECT t FROM p) AND ${a}.tx_to > (SELECT t FROM p)`;
  return {
    table: "resource_history",
    at,
    live: (a) => `${at(a)} AND NOT ${a}.is_deleted`,
    with: `p AS (SELECT least(${param}::timestamptz, last) AS t FROM clock),`,
    visible: (grants, a) => visibleAt(grants, a, "(SELECT t FROM p)"),
  };
}

interface ChildRow {
  parent_ok: boolean;
  identifier: string | null;
  payload_type: string;
  parent_identifier: string | null;
  created_at: string;
  payload: JsonObject;
  child_count: string | null;
  descendant_count: string | null;
}

/**
 * Children the caller may see, with counts of what it may see below them
 * (the full tree's descendants, filtered); a parent it may not see is 404.
 */
export async function listChildren(db: Db, grants: Grants, options: ChildrenOptions = {}): Promise<TreeNodeRow[]> {
  const parent = options.parentIdentifier ?? null;
  if (parent !== null) checkIdentifier(parent, "parent_identifier");
  const withPayloads = options.withPayloads === true;
  const asOf = options.asOf;

  const sql =
    asOf === undefined
      ? childrenSql(CURRENT, true, withPayloads, grants, parent === null)
      : childrenSql(asOfSource("$2"), false, withPayloads, grants, parent === null);
  // Never a named statement: its plan hinges on the parent (a series of 100
  // files, a datasource of 5,000 patients). Named, PostgreSQL switched it to
  // one generic plan after calls on smaller parents (ten on a 500-child
  // datasource), which listed a 5,000-child parent in 700 ms instead of 17
  // (BENCHMARKS.md, scale at 20M).
  const { rows } = await db.query<ChildRow>(sql, asOf === undefined ? [parent] : [parent, asOf]);

  if (rows[0]?.parent_ok !== true) throw notFound(`parent ${parent ?? ""} is not an active resource at that time`);
  const max = options.maxChildren ?? DEFAULT_MAX_CHILDREN;
  const count = rows.filter((r) => r.identifier !== null).length;
  if (count > max)
    throw failedPrecondition(
      `${parent ?? "the root"} has ${count} children, more than ${max} (MAX_CHILDREN); use a query with parent_identifier and paging`,
      "TOO_MANY_CHILDREN",
    );
  return rows
    .filter((r) => r.identifier !== null)
    .map((r) => ({
      identifier: r.identifier as string,
      payloadType: r.payload_type,
      parentIdentifier: r.parent_identifier,
      createdAt: r.created_at,
      childCount: Number(r.child_count ?? 0),
      descendantCount: Number(r.descendant_count ?? 0),
      ...(withPayloads ? { payload: r.payload } : {}),
    }));
}

/**
 * One row per child plus, always, one leading `parent_ok` (a LEFT JOIN from
 * the parent check), so "no children" and "no such parent" differ.
 * Now the counts are the stored ones (tree_counts, kept by the writes:
 * migrations/0020-tree-counts.ts), summed over the classes the caller may
 * see: a key lookup per listed node. At an as_of point a recursive walk
 * below the listed nodes counts them, bounded by the subtree named.
 * `roots`: the statement for the roots (parent IS NULL, which the parent
 * index answers), else for the children of $1.
 */
function childrenSql(src: Source, stored: boolean, withPayloads: boolean, grants: Grants, roots: boolean): string {
  const vis = (a: string) => andVisible(src.visible(grants, a));
  const seen = src.visible(grants, "c");
  const counts = stored
    ? `counts AS (
         SELECT n.identifier AS root, t.child_count, t.descendant_count FROM nodes n
          CROSS JOIN LATERAL (SELECT sum(c.children) AS child_count, sum(c.descendants) AS descendant_count
                                FROM tree_counts c WHERE c.node = n.identifier${andVisible(visibleNow(grants, "c"))}) t
       )`
    : // Each step probes the parent index from the rows found (LATERAL with
      // OFFSET 0, not flattened into a join): as a join the planner hashed a
      // sequential scan of the whole table at every step.
      // The walk is the full tree's; only what the caller may see is counted.
      `sub(root, identifier, depth, seen) AS (
         SELECT n.identifier, c.identifier, 1, c.seen FROM nodes n
          CROSS JOIN LATERAL (SELECT c.identifier, ${seen ?? "true"} AS seen FROM ${src.table} c
                               WHERE c.parent_identifier = n.identifier AND ${src.live("c")} OFFSET 0) c
         UNION ALL
         SELECT s.root, c.identifier, s.depth + 1, c.seen FROM sub s
          CROSS JOIN LATERAL (SELECT c.identifier, ${seen ?? "true"} AS seen FROM ${src.table} c
                               WHERE c.parent_identifier = s.identifier AND ${src.live("c")} OFFSET 0) c
       ),
       counts AS (
         SELECT root, count(*) FILTER (WHERE depth = 1 AND seen) AS child_count, count(*) FILTER (WHERE seen) AS descendant_count
           FROM sub GROUP BY root
       )`;
  return `WITH${stored ? "" : " RECURSIVE"} ${src.with}
     parent_ok AS (
       SELECT ${roots ? "true" : `EXISTS (SELECT 1 FROM ${src.table} x WHERE x.identifier = $1::text AND ${src.live("x")}${vis("x")})`} AS ok
     ),
     nodes AS (
       SELECT n.identifier, n.payload_type, n.parent_identifier, n.created_at${withPayloads ? ", n.payload" : ""}
         FROM ${src.table} n
        WHERE ${src.live("n")}${vis("n")}
          AND ${roots ? "n.parent_identifier IS NULL AND $1::text IS NULL" : "n.parent_identifier = $1::text"}
     ),
     ${counts}
     SELECT po.ok AS parent_ok, n.identifier, n.payload_type, n.parent_identifier, ${ts("n.created_at")} AS created_at,
            ${withPayloads ? "n.payload" : "NULL::jsonb AS payload"},
            c.child_count::text AS child_count, c.descendant_count::text AS descendant_count
       FROM parent_ok po
       LEFT JOIN nodes n ON po.ok
       LEFT JOIN counts c ON c.root = n.identifier
      ORDER BY n.created_at, n.identifier`;
}

/** The chain stops before the first ancestor the caller may not see (docs/contract/18-access.md). */
function parentsSql(src: Source, grants: Grants): string {
  const vis = (a: string) => andVisible(src.visible(grants, a));
  return `WITH RECURSIVE ${src.with}
     chain(identifier, parent_identifier, depth) AS (
       SELECT x.identifier, x.parent_identifier, 0 FROM ${src.table} x WHERE x.identifier = $1::text AND ${src.live("x")}${vis("x")}
       UNION ALL
       SELECT a.identifier, a.parent_identifier, c.depth + 1
         FROM chain c JOIN ${src.table} a ON a.identifier = c.parent_identifier
        WHERE ${src.at("a")}${vis("a")}
     )
     SELECT identifier, depth FROM chain ORDER BY depth`;
}

// Key lookups up the chain whatever the identifier: prepared once per connection.
const PARENTS_CURRENT = prepared(parentsSql(CURRENT, ALL_GRANTS));

/**
 * The ancestors of `identifier`, nearest first, itself excluded. The chain
 * follows parent_identifier through tombstoned ancestors too; the resource
 * itself must be active at the read point.
 */
export async function listParents(
  db: Db,
  grants: Grants,
  identifier: string,
  options: { asOf?: string } = {},
): Promise<string[]> {
  checkIdentifier(identifier);
  const { rows } =
    options.asOf === undefined
      ? await db.query<{ identifier: string; depth: number }>(
          seesEverything(grants) ? PARENTS_CURRENT : named(db, parentsSql(CURRENT, grants)),
          [identifier],
        )
      : await db.query<{ identifier: string; depth: number }>(parentsSql(asOfSource("$2"), grants), [
          identifier,
          options.asOf,
        ]);
  if (rows.length === 0) throw notFound(`${identifier} is not an active resource at that time`);
  return rows.slice(1).map((r) => r.identifier);
}
