// A QueryRequest checked and normalised into a plan: fields resolved in the
// registry, ops checked against field types, values turned into typed bind
// parameters. Everything a client can get wrong fails here, before SQL.
import { createHash } from "node:crypto";
import type { JsonValue } from "@bufbuild/protobuf";
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import type { Condition, QueryRequest } from "../../../gen/resourcestore/type/v1/query_pb.js";
import { filterTooDeep, invalidArgument } from "../../errors.js";
import type { PayloadType } from "../../schema/payload-registry.js";
import { checkIdentifier, checkIdentifiers, payloadTypeOrThrow } from "../../schema/validate.js";
import { isScalar, resolveField, type QueryField, type SqlType } from "./fields.js";
import { bindValue } from "./values.js";

export const OPS = [
  "eq",
  "ne",
  "lt",
  "lte",
  "gt",
  "gte",
  "in",
  "not_in",
  "contains",
  "starts_with",
  "is_null",
  "is_not_null",
] as const;
type Op = (typeof OPS)[number];

const ORDERED: readonly Op[] = ["eq", "ne", "lt", "lte", "gt", "gte", "in", "not_in", "is_null", "is_not_null"];
const OPS_BY_TYPE: Record<SqlType, readonly Op[]> = {
  text: [...ORDERED, "contains", "starts_with"],
  date: ORDERED,
  int: ORDERED,
  bigint: ORDERED,
  float8: ORDERED,
  timestamptz: ORDERED,
  bool: ["eq", "ne", "in", "not_in", "is_null", "is_not_null"],
  text_list: ["contains"],
  json_map: ["is_null", "is_not_null"],
};

const MAX_DEPTH = 8;
const MAX_CONDITIONS = 1000;
const MAX_IN_VALUES = 10_000;
export const MAX_LIMIT = 10_000;

type Bound = string | number | boolean;

export type FilterNode =
  | {
      readonly kind: "cmp";
      readonly field: QueryField;
      readonly op: Op;
      readonly value?: Bound;
      readonly values?: readonly Bound[];
    }
  | { readonly kind: "any"; readonly items: readonly FilterNode[] };

export interface QueryPlan {
  readonly payloadType: PayloadType | undefined;
  readonly filters: readonly FilterNode[];
  readonly parent: string | undefined;
  readonly indirect: boolean;
  readonly identifiers: readonly string[] | undefined;
  readonly sort: QueryField;
  readonly desc: boolean;
  /** Extra columns asked for; undefined = every field. */
  readonly select: readonly QueryField[] | undefined;
  /** Identity of the query for cursors (everything but limit, select, cursor, as_of). */
  readonly hash: string;
}

function conditionValue(c: Condition): JsonValue | undefined {
  return c.value === undefined ? undefined : toJson(ValueSchema, c.value);
}

function planCondition(
  c: Condition,
  pt: PayloadType | undefined,
  depth: number,
  budget: { n: number; maxDepth: number },
): FilterNode {
  budget.n += 1;
  if (budget.n > MAX_CONDITIONS)
    throw invalidArgument(`too many filter conditions (at most ${MAX_CONDITIONS})`, "INVALID_QUERY");
  if (c.any.length > 0) {
    if (c.field !== "" || c.op !== "" || c.value !== undefined) {
      throw invalidArgument("a filter is either {field, op, value} or {any: [...]}, not both", "INVALID_QUERY");
    }
    if (depth >= budget.maxDepth) throw filterTooDeep(budget.maxDepth);
    return { kind: "any", items: c.any.map((x) => planCondition(x, pt, depth + 1, budget)) };
  }
  if (c.field === "") throw invalidArgument("a filter needs a field (or an any group)", "INVALID_QUERY");
  const field = resolveField(c.field, pt);
  const op = c.op as Op;
  if (!OPS.includes(op))
    throw invalidArgument(
      `unknown filter op ${JSON.stringify(c.op)}; expected one of ${OPS.join(", ")}`,
      "INVALID_QUERY",
    );
  if (!OPS_BY_TYPE[field.type].includes(op))
    throw invalidArgument(`op ${op} does not apply to field ${field.name}`, "INVALID_QUERY");
  const value = conditionValue(c);
  if (op === "is_null" || op === "is_not_null") {
    if (value !== undefined && value !== null) throw invalidArgument(`op ${op} takes no value`, "INVALID_QUERY");
    return { kind: "cmp", field, op };
  }
  if (op === "in" || op === "not_in") {
    if (!Array.isArray(value)) throw invalidArgument(`op ${op} on ${field.name} takes an array`, "INVALID_QUERY");
    if (value.length > MAX_IN_VALUES)
      throw invalidArgument(`op ${op} takes at most ${MAX_IN_VALUES} values`, "INVALID_QUERY");
    return { kind: "cmp", field, op, values: value.map((v) => bindValue(field, v)) };
  }
  return { kind: "cmp", field, op, value: bindValue(field, value) };
}

function canonical(node: FilterNode): unknown {
  return node.kind === "any"
    ? { any: node.items.map(canonical) }
    : [node.field.name, node.op, node.value ?? null, node.values ?? null];
}

export function planQuery(req: QueryRequest, options: { maxFilterDepth?: number } = {}): QueryPlan {
  const pt = req.payloadType !== undefined ? payloadTypeOrThrow(req.payloadType) : undefined;
  const budget = { n: 0, maxDepth: options.maxFilterDepth ?? MAX_DEPTH };
  const filters = req.filters.map((c) => planCondition(c, pt, 0, budget));
  const parent =
    req.parentIdentifier !== undefined ? checkIdentifier(req.parentIdentifier, "parent_identifier") : undefined;
  const indirect = req.includeIndirectParents === true;
  if (req.identifiers.length > MAX_LIMIT)
    throw invalidArgument(`too many identifiers (at most ${MAX_LIMIT})`, "BATCH_TOO_LARGE");
  const identifiers = req.identifiers.length > 0 ? checkIdentifiers(req.identifiers) : undefined;
  const sort = resolveField(req.sortBy ?? "created_at", pt);
  if (!isScalar(sort)) throw invalidArgument(`cannot sort by ${sort.name}: not a scalar field`, "INVALID_QUERY");
  const order = (req.sortOrder ?? "desc").toLowerCase();
  if (order !== "asc" && order !== "desc")
    throw invalidArgument(`sort_order must be asc or desc, got ${JSON.stringify(req.sortOrder)}`, "INVALID_QUERY");
  let select: QueryField[] | undefined;
  if (req.selectColumns.length > 0) {
    const seen = new Set<string>();
    select = [];
    for (const name of req.selectColumns) {
      const f = resolveField(name, pt);
      if (!seen.has(f.name)) select.push(f);
      seen.add(f.name);
    }
  }
  const identity = {
    pt: pt?.name ?? null,
    filters: filters.map(canonical),
    parent: parent ?? null,
    indirect,
    ids: identifiers ?? null,
    sort: sort.name,
    desc: order === "desc",
  };
  const hash = createHash("sha256").update(JSON.stringify(identity)).digest("base64url");
  return { payloadType: pt, filters, parent, indirect, identifiers, sort, desc: order === "desc", select, hash };
}
