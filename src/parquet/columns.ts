// The columns of a query export and how each reads its value from a query
// row. Types come from the payload registry: strings, int32/int64, doubles,
// booleans, UTC microsecond timestamps, derived_from as a list of strings,
// maps (and the untyped payload) as JSON strings.
import type { JsonValue } from "@bufbuild/protobuf";
import type { QueryField, QueryPlan, QueryRow } from "../store/index.js";
import { queryMetadataNames, resolveField } from "../store/index.js";

export type ColumnKind = "utf8" | "int32" | "int64" | "float64" | "bool" | "timestamp" | "utf8_list";

export interface ColumnSpec {
  readonly name: string;
  readonly kind: ColumnKind;
  /** Few distinct values: dictionary encoding pays off. */
  readonly lowCardinality: boolean;
  /**
   * The value of this column in a row; null = null. int64 columns give a
   * decimal string, a safe integer or a bigint, timestamp columns the stamp
   * string: the batch builder converts them without a BigInt per value.
   */
  get(row: QueryRow): string | number | bigint | boolean | readonly string[] | null;
}

const LOW_CARDINALITY_METADATA = new Set(["payload_type", "access_level", "license"]);

function metadataColumn(f: QueryField): ColumnSpec {
  const low = LOW_CARDINALITY_METADATA.has(f.name);
  const col = (kind: ColumnKind, get: ColumnSpec["get"]): ColumnSpec => ({ name: f.name, kind, lowCardinality: low, get });
  switch (f.name) {
    case "derived_from":
      return col("utf8_list", (r) => r.derived_from);
    case "created_at":
      return col("timestamp", (r) => r.created_at);
    case "updated_at":
      return col("timestamp", (r) => r.updated_at);
    case "version":
      return col("int64", (r) => r.version);
    default: {
      const key = f.name as "identifier" | "payload_type" | "parent_identifier" | "license" | "access_level";
      return col("utf8", (r) => r[key]);
    }
  }
}

function payloadColumn(f: QueryField, lowCardinality: boolean): ColumnSpec {
  const key = f.key ?? f.name;
  const value = (r: QueryRow): JsonValue | undefined => r.payload[key];
  const col = (kind: ColumnKind, get: ColumnSpec["get"]): ColumnSpec => ({ name: f.name, kind, lowCardinality, get });
  switch (f.type) {
    case "int":
      return col("int32", (r) => (typeof value(r) === "number" ? (value(r) as number) : null));
    case "bigint":
      return col("int64", (r) => {
        const v = value(r);
        return typeof v === "string" || typeof v === "number" ? v : null;
      });
    case "float8":
      return col("float64", (r) => {
        const v = value(r);
        return typeof v === "number" || typeof v === "string" ? Number(v) : null;
      });
    case "bool":
      return col("bool", (r) => (typeof value(r) === "boolean" ? (value(r) as boolean) : null));
    case "json_map":
      return col("utf8", (r) => {
        const v = value(r);
        return v === undefined || v === null ? null : JSON.stringify(v);
      });
    case "text_list":
      return col("utf8_list", (r) => {
        const v = value(r);
        return Array.isArray(v) ? (v as string[]) : null;
      });
    default:
      return col("utf8", (r) => {
        const v = value(r);
        return typeof v === "string" ? v : null;
      });
  }
}

function columnOf(f: QueryField, plan: QueryPlan): ColumnSpec {
  if (f.source === "metadata") return metadataColumn(f);
  const info = plan.payloadType?.fieldByName.get(f.name);
  return payloadColumn(f, info?.rules.oneOf !== undefined);
}

/**
 * select_columns: identifier and payload_type, then the named ones. Without
 * them: the metadata, then the payload fields of payload_type, or one
 * `payload` JSON column when there is no type.
 */
export function exportColumns(plan: QueryPlan): ColumnSpec[] {
  const pt = plan.payloadType;
  if (plan.select) {
    const names = ["identifier", "payload_type", ...plan.select.map((f) => f.name).filter((n) => n !== "identifier" && n !== "payload_type")];
    return names.map((n) => columnOf(resolveField(n, pt), plan));
  }
  const cols = queryMetadataNames.map((n) => columnOf(resolveField(n, pt), plan));
  if (pt) {
    for (const info of pt.fields) cols.push(columnOf(resolveField(info.name, pt), plan));
  } else {
    cols.push({ name: "payload", kind: "utf8", lowCardinality: false, get: (r) => JSON.stringify(r.payload) });
  }
  return cols;
}
