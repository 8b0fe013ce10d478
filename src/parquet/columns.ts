// The columns of a query export and how each reads its value from a query
// row. Types come from the payload registry: strings, int32/int64, doubles,
// booleans, UTC microsecond timestamps, derived_from as a list of strings,
// maps (and the untyped payload) as JSON strings.
import type { JsonValue } from "@bufbuild/protobuf";
import type { QueryField, QueryPlan, QueryRow } from "../store/index.js";
import { queryMetadataNames, resolveField } from "../store/index.js";
import type { ColumnKind, Wire } from "./copy-batch.js";

export type { ColumnKind };

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
  /** The same value as an expression over the row `r` of the export's statement, for the COPY path ... */
  readonly sql?: string;
  /** ... and how it travels there (copy-batch.ts). A column without both is only built from rows. */
  readonly wire?: Wire;
}

/** A SQL string literal (standard_conforming_strings: only the quote is doubled). */
const literal = (s: string): string => `'${s.replace(/'/g, "''")}'`;

const LOW_CARDINALITY_METADATA = new Set(["payload_type", "access_level", "license"]);

function metadataColumn(f: QueryField): ColumnSpec {
  const low = LOW_CARDINALITY_METADATA.has(f.name);
  const col = (kind: ColumnKind, get: ColumnSpec["get"], sql: string, wire: Wire): ColumnSpec => ({
    name: f.name,
    kind,
    lowCardinality: low,
    get,
    sql,
    wire,
  });
  switch (f.name) {
    case "derived_from":
      return col("utf8_list", (r) => r.derived_from, "r.derived_from::text[]", "text_array");
    case "created_at":
      return col("timestamp", (r) => r.created_at, "r.created_at::timestamptz", "timestamptz");
    case "updated_at":
      return col("timestamp", (r) => r.updated_at, "r.updated_at::timestamptz", "timestamptz");
    case "version":
      return col("int64", (r) => r.version, "r.version::int8", "int8");
    default: {
      const key = f.name as "identifier" | "payload_type" | "parent_identifier" | "license" | "access_level";
      return col("utf8", (r) => r[key], `r.${key}::text`, "text");
    }
  }
}

/** A payload field's column (exported for the COPY path's tests, which build every kind). */
export function payloadColumn(f: QueryField, lowCardinality: boolean): ColumnSpec {
  const key = f.key ?? f.name;
  const value = (r: QueryRow): JsonValue | undefined => r.payload[key];
  const sql = `r.payload -> ${literal(key)}`;
  const col = (kind: ColumnKind, get: ColumnSpec["get"], wire: Wire): ColumnSpec => ({
    name: f.name,
    kind,
    lowCardinality,
    get,
    sql,
    wire,
  });
  switch (f.type) {
    case "int":
      return col("int32", (r) => (typeof value(r) === "number" ? (value(r) as number) : null), "json_int");
    case "bigint":
      return col(
        "int64",
        (r) => {
          const v = value(r);
          return typeof v === "string" || typeof v === "number" ? v : null;
        },
        "json_bigint",
      );
    case "float8":
      return col(
        "float64",
        (r) => {
          const v = value(r);
          return typeof v === "number" || typeof v === "string" ? Number(v) : null;
        },
        "json_float",
      );
    case "bool":
      return col("bool", (r) => (typeof value(r) === "boolean" ? (value(r) as boolean) : null), "json_bool");
    case "json_map":
      return col(
        "utf8",
        (r) => {
          const v = value(r);
          return v === undefined || v === null ? null : JSON.stringify(v);
        },
        "json_text",
      );
    case "text_list":
      return col(
        "utf8_list",
        (r) => {
          const v = value(r);
          return Array.isArray(v) ? (v as string[]) : null;
        },
        "json_list",
      );
    default:
      return col(
        "utf8",
        (r) => {
          const v = value(r);
          return typeof v === "string" ? v : null;
        },
        "json_string",
      );
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
    const names = [
      "identifier",
      "payload_type",
      ...plan.select.map((f) => f.name).filter((n) => n !== "identifier" && n !== "payload_type"),
    ];
    return names.map((n) => columnOf(resolveField(n, pt), plan));
  }
  const cols = queryMetadataNames.map((n) => columnOf(resolveField(n, pt), plan));
  if (pt) {
    for (const info of pt.fields) cols.push(columnOf(resolveField(info.name, pt), plan));
  } else {
    cols.push({
      name: "payload",
      kind: "utf8",
      lowCardinality: false,
      get: (r) => JSON.stringify(r.payload),
      sql: "r.payload",
      wire: "json_text",
    });
  }
  return cols;
}

/** The select list of the export's COPY statement, one expression per column in order; undefined when a column has none. */
export function exportSelect(columns: readonly ColumnSpec[]): string | undefined {
  if (columns.some((c) => c.sql === undefined || c.wire === undefined)) return undefined;
  return columns.map((c) => c.sql).join(", ");
}
