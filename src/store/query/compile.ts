// A plan rendered as parameterized SQL. Field expressions come from the
// registry (fields.ts), every client value is a bound parameter, and the
// read point is either the current table or the history at a point.
import type { Grants } from "../../access/index.js";
import { resourceColumns, ts } from "../sql.js";
import { visibleAt, visibleNow } from "../visibility.js";
import { descendantsCte, type RowSource } from "./descendants.js";
import type { QueryField } from "./fields.js";
import type { FilterNode, QueryPlan } from "./plan.js";
import { PARAM_CAST } from "./values.js";

/** Where a query reads: now (and learn the point), at least(as_of, clock), or at a pinned point. */
export type ReadPoint =
  | { readonly kind: "now" }
  | { readonly kind: "as_of"; readonly asOf: string }
  | { readonly kind: "pinned"; readonly at: string };

/** The last row of a page: its sort value as text (null for a null value) and its identifier. */
export interface Keyset {
  readonly value: string | null;
  readonly identifier: string;
}

export interface Statement {
  readonly sql: string;
  readonly params: unknown[];
}

interface Params {
  readonly values: unknown[];
  add(value: unknown, cast: string): string;
}

function createParams(): Params {
  const values: unknown[] = [];
  return {
    values,
    add(value, cast) {
      values.push(value);
      return `$${values.length}::${cast}`;
    },
  };
}

/**
 * Payload keys with an expression index of their own (migration 0022): the
 * identifying fields, whose equality matches few rows. The indexes are
 * partial on `<expr> IS NOT NULL`, which the rendered filter states.
 */
const INDEXED_PAYLOAD_KEYS: ReadonlySet<string> = new Set([
  "path",
  "sha256",
  "accession_number",
  "study_date",
  "datasource_id",
]);

const indexedKey = (field: QueryField): boolean =>
  field.source === "payload" &&
  (field.type === "text" || field.type === "date") &&
  INDEXED_PAYLOAD_KEYS.has(field.key ?? "");

/** Containment lets the GIN index on payload answer equality on strings, dates and booleans. */
const containable = (field: QueryField): boolean =>
  field.source === "payload" && (field.type === "text" || field.type === "date" || field.type === "bool");

function renderFilter(node: FilterNode, p: Params): string {
  if (node.kind === "any")
    return node.items.length === 0 ? "false" : `(${node.items.map((n) => renderFilter(n, p)).join(" OR ")})`;
  const { field, op } = node;
  const e = field.expr("r");
  const cast = PARAM_CAST[field.type];
  const one = () => p.add(node.value, cast);
  const contains = (v: unknown) => `r.payload @> ${p.add(JSON.stringify({ [field.key ?? ""]: v }), "jsonb")}`;
  switch (op) {
    case "is_null":
      return `${e} IS NULL`;
    case "is_not_null":
      return `${e} IS NOT NULL`;
    case "eq":
      if (indexedKey(field)) return `(${e} IS NOT NULL AND ${e} = ${one()})`;
      if (containable(field)) return contains(node.value);
      return `${e} = ${one()}`;
    case "ne":
      // A null field is "not equal" to every value.
      return `${e} IS DISTINCT FROM ${one()}`;
    case "lt":
      return `${e} < ${one()}`;
    case "lte":
      return `${e} <= ${one()}`;
    case "gt":
      return `${e} > ${one()}`;
    case "gte":
      return `${e} >= ${one()}`;
    case "in":
      if (indexedKey(field)) return `(${e} IS NOT NULL AND ${e} = ANY(${p.add(node.values ?? [], `${cast}[]`)}))`;
      // One containment per value: a BitmapOr over the GIN index (the list is bounded, MAX_IN_VALUES).
      if (containable(field))
        return (node.values ?? []).length === 0 ? "false" : `(${(node.values ?? []).map(contains).join(" OR ")})`;
      return `${e} = ANY(${p.add(node.values ?? [], `${cast}[]`)})`;
    case "not_in":
      return `(${e} IS NULL OR NOT (${e} = ANY(${p.add(node.values ?? [], `${cast}[]`)})))`;
    case "contains":
      if (field.type === "text_list") return `${e} @> ARRAY[${one()}]`;
      return `strpos(${e}, ${one()}) > 0`;
    case "starts_with":
      return `starts_with(${e}, ${one()})`;
  }
}

/** The SQL of a timestamp read point as text; -infinity (no write yet) has no RFC 3339 form. */
function pointText(t: string): string {
  return `CASE WHEN isfinite(${t}) THEN ${ts(t)} ELSE '-infinity' END`;
}

function sortKeyText(f: QueryField): string {
  return f.type === "timestamptz" ? ts(f.expr("r")) : `(${f.expr("r")})::text`;
}

function keysetPredicate(plan: QueryPlan, after: Keyset, p: Params): string {
  const f = plan.sort;
  const cmp = plan.desc ? "<" : ">";
  const id = p.add(after.identifier, "text");
  if (f.name === "identifier") return `r.identifier ${cmp} ${id}`;
  const e = f.expr("r");
  if (after.value === null) {
    // Nulls come last ascending and first descending.
    return plan.desc
      ? `((${e} IS NULL AND r.identifier < ${id}) OR ${e} IS NOT NULL)`
      : `(${e} IS NULL AND r.identifier > ${id})`;
  }
  const v = p.add(after.value, PARAM_CAST[f.type]);
  if (!f.nullable) return `(${e}, r.identifier) ${cmp} (${v}, ${id})`;
  const tail = plan.desc ? "" : ` OR ${e} IS NULL`;
  return `(${e} ${cmp} ${v} OR (${e} = ${v} AND r.identifier ${cmp} ${id})${tail})`;
}

interface Body {
  readonly with: string;
  readonly from: string;
  readonly where: string;
  /** SQL of the read point, usable in the select list. */
  readonly point: string;
}

function body(plan: QueryPlan, point: ReadPoint, grants: Grants, p: Params): Body {
  let source: RowSource;
  let t: string;
  if (point.kind === "now") {
    source = { kind: "current" };
    t = "(SELECT last FROM clock)";
  } else {
    t =
      point.kind === "as_of"
        ? `(SELECT least(${p.add(point.asOf, "timestamptz")}, last) FROM clock)`
        : p.add(point.at, "timestamptz");
    source = { kind: "history", point: t };
  }
  // At a point, `created_at <= t` too: every version active at t was
  // created at or before it (created_at <= tx_from), so it drops nothing,
  // and it bounds the walks of the creation order (the default sort, by
  // resources_type_created_idx and its twin on the versions) to what
  // existed at the point; a page at an early point otherwise walked every
  // resource created since (test/query/as-of-page-plans.test.ts).
  const where: string[] =
    source.kind === "current"
      ? ["NOT r.is_deleted"]
      : [`r.tx_from <= ${t}`, `r.tx_to > ${t}`, `r.created_at <= ${t}`, "NOT r.is_deleted"];
  const ctes: string[] = [];
  if (plan.payloadType) where.push(`r.payload_type = ${p.add(plan.payloadType.name, "text")}`);
  if (plan.identifiers) where.push(`r.identifier = ANY(${p.add(plan.identifiers, "text[]")})`);
  if (plan.parent !== undefined) {
    const root = p.add(plan.parent, "text");
    if (plan.indirect) {
      ctes.push(descendantsCte(source, root));
      // Now the walk yields the rows themselves (read FROM descendants below); as of a point, identifiers.
      if (source.kind !== "current") where.push("r.identifier IN (SELECT identifier FROM descendants)");
    } else {
      where.push(`r.parent_identifier = ${root}`);
    }
  }
  for (const f of plan.filters) where.push(renderFilter(f, p));
  // What the caller may not see is not there (docs/contract/18-access.md): the walk
  // of descendants is the full tree's, its answer filtered like every row.
  const visible = source.kind === "current" ? visibleNow(grants, "r") : visibleAt(grants, "r", t);
  if (visible !== undefined) where.push(visible);
  return {
    with: ctes.length > 0 ? `WITH RECURSIVE ${ctes.join(", ")}` : "",
    from:
      source.kind === "current"
        ? plan.parent !== undefined && plan.indirect
          ? "descendants r"
          : "resources r"
        : "resource_history r",
    where: where.join(" AND "),
    point: t,
  };
}

function orderBy(plan: QueryPlan): string {
  const dir = plan.desc ? "DESC NULLS FIRST" : "ASC NULLS LAST";
  const id = `r.identifier ${plan.desc ? "DESC" : "ASC"}`;
  return plan.sort.name === "identifier" ? id : `${plan.sort.expr("r")} ${dir}, ${id}`;
}

export interface PageOptions {
  readonly after?: Keyset;
  /** Rows to fetch; unset = all. */
  readonly limit?: number;
  /**
   * A select list over the row `r` in place of the resource columns, __k
   * and __t (a parquet export's own typed columns); same rows, same order.
   */
  readonly select?: string;
}

/**
 * How far a filtered page walks its type's sort order before it gives up
 * on the walk: this many rows per row asked for (see headFirstStatement).
 */
export const HEAD_WALK_FACTOR = 16;

/**
 * A page now of one payload type, in the default sort (created_at, which
 * resources_type_created_idx holds per type), with a limit and filters of
 * which none has an index of its own (INDEXED_PAYLOAD_KEYS), and no parent
 * or identifiers to start from.
 */
function headFirst(plan: QueryPlan, point: ReadPoint, limit: number | undefined): boolean {
  return (
    point.kind === "now" &&
    limit !== undefined &&
    plan.payloadType !== undefined &&
    plan.parent === undefined &&
    plan.identifiers === undefined &&
    plan.filters.length > 0 &&
    plan.sort.name === "created_at" &&
    !plan.filters.some(function indexed(f: FilterNode): boolean {
      return f.kind === "any" ? f.items.some(indexed) : indexedKey(f.field);
    })
  );
}

/**
 * A filtered page with a limit that costs what it returns (issue 40). The
 * planner cannot see that a containment on a payload field and the payload
 * type are correlated (modality = CT holds a quarter of the series, not a
 * quarter of 1% of them), so it fetched and sorted every match through the
 * GIN index: linear in the store. Here the page first walks the type's sort
 * order (resources_type_created_idx) for at most HEAD_WALK_FACTOR x limit
 * rows and filters them; when that prefix of the sort order holds a full
 * page, its matches are the page (any later match sorts after them), and the
 * walk stopped at the limit. Otherwise (a rare value) the second arm, gated
 * on the first's count, runs the plain statement, which the GIN index answers
 * at the cost of the few matches. The prefix's LIMIT keeps the filters out
 * of the walk, so the planner cannot turn it back into a fetch-and-sort.
 */
function headFirstStatement(
  plan: QueryPlan,
  point: ReadPoint,
  grants: Grants,
  options: PageOptions & { readonly limit: number },
): Statement {
  const p = createParams();
  const pt = p.add(plan.payloadType?.name, "text");
  const keyset = options.after ? ` AND ${keysetPredicate(plan, options.after, p)}` : "";
  const walk = p.add(options.limit * HEAD_WALK_FACTOR, "int8");
  const limit = p.add(options.limit, "int8");
  const t = "(SELECT last FROM clock)";
  const select = options.select ?? `${resourceColumns("r")}, ${sortKeyText(plan.sort)} AS __k, ${pointText(t)} AS __t`;
  const rest = plan.filters.map((f) => renderFilter(f, p));
  const visible = visibleNow(grants, "r");
  if (visible !== undefined) rest.push(visible);
  const order = orderBy(plan);
  const sql = `WITH head AS MATERIALIZED (
      SELECT ${select}
        FROM (SELECT * FROM resources r WHERE NOT r.is_deleted AND r.payload_type = ${pt}${keyset} ORDER BY ${order} LIMIT ${walk}) r
       WHERE ${rest.join(" AND ")}
       ORDER BY ${order} LIMIT ${limit})
    SELECT * FROM head WHERE (SELECT count(*) FROM head) >= ${limit}
    UNION ALL
    (SELECT ${select}
       FROM resources r
      WHERE NOT r.is_deleted AND r.payload_type = ${pt}${keyset} AND ${rest.join(" AND ")}
        AND (SELECT count(*) FROM head) < ${limit}
      ORDER BY ${order} LIMIT ${limit})`;
  return { sql, params: p.values };
}

/** Rows: resource columns plus __k (sort key text) and __t (the read point as text). */
export function pageStatement(plan: QueryPlan, point: ReadPoint, grants: Grants, options: PageOptions = {}): Statement {
  if (options.limit !== undefined && headFirst(plan, point, options.limit))
    return headFirstStatement(plan, point, grants, { ...options, limit: options.limit });
  const p = createParams();
  const b = body(plan, point, grants, p);
  const keyset = options.after ? ` AND ${keysetPredicate(plan, options.after, p)}` : "";
  const limit = options.limit !== undefined ? ` LIMIT ${p.add(options.limit, "int8")}` : "";
  const sql = `${b.with}
    SELECT ${options.select ?? `${resourceColumns("r")}, ${sortKeyText(plan.sort)} AS __k, ${pointText(b.point)} AS __t`}
      FROM ${b.from}
     WHERE ${b.where}${keyset}
     ORDER BY ${orderBy(plan)}${limit}`;
  return { sql, params: p.values };
}

export function countStatement(plan: QueryPlan, point: ReadPoint, grants: Grants): Statement {
  const p = createParams();
  const stored = storedCount(plan, point, grants, p);
  if (stored !== undefined) return { sql: stored, params: p.values };
  const b = body(plan, point, grants, p);
  return { sql: `${b.with} SELECT count(*)::text AS n FROM ${b.from} WHERE ${b.where}`, params: p.values };
}

/**
 * The count of a whole subtree now (descendants of a parent, of one payload
 * type or all, no other filter) is stored: tree_counts holds it per class
 * (migrations/0020-tree-counts.ts), summed over what the caller may see, the
 * same rows the walk would count. The walk starts at the parent whatever
 * its state, and a node's stored counts are its active reach whatever its
 * state too (a tombstone keeps them), so the two agree for any parent.
 */
function storedCount(plan: QueryPlan, point: ReadPoint, grants: Grants, p: Params): string | undefined {
  if (
    point.kind !== "now" ||
    plan.parent === undefined ||
    !plan.indirect ||
    plan.filters.length > 0 ||
    plan.identifiers !== undefined
  )
    return undefined;
  const where = [`c.node = ${p.add(plan.parent, "text")}`];
  if (plan.payloadType) where.push(`c.payload_type = ${p.add(plan.payloadType.name, "text")}`);
  const visible = visibleNow(grants, "c");
  if (visible !== undefined) where.push(visible);
  return `SELECT coalesce(sum(c.descendants), 0)::text AS n FROM tree_counts c WHERE ${where.join(" AND ")}`;
}
