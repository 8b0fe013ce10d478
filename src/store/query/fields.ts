// The fields a query may name: the metadata of Resource and, when a
// payload_type is given, that type's payload fields, both taken from the
// payload registry. Each field knows its SQL type and how to read it from a
// row aliased `r`; the payload key is a registry constant, never client text.
import { invalidArgument } from "../../errors.js";
import { metadataFieldByName, type FieldInfo, type PayloadType } from "../../schema/payload-registry.js";

/** How a field is compared in SQL. `date` is a YYYY-MM-DD string: compared as text, which orders it as a date. */
export type SqlType = "text" | "int" | "bigint" | "float8" | "bool" | "timestamptz" | "date" | "text_list" | "json_map";

export interface QueryField {
  readonly name: string;
  readonly type: SqlType;
  readonly source: "metadata" | "payload";
  readonly nullable: boolean;
  /** The typed SQL expression of the field in row alias `a`. */
  expr(a: string): string;
  /** For payload fields: the key inside `payload` (a registry constant). */
  readonly key?: string;
}

const SAFE_NAME = /^[a-z][a-z0-9_]*$/;

function literal(name: string): string {
  // Registry names are proto field names; the check keeps that assumption honest.
  if (!SAFE_NAME.test(name)) throw new Error(`field name ${name} is not a plain proto field name`);
  return `'${name}'`;
}

const METADATA: ReadonlyMap<string, QueryField> = new Map(
  (
    [
      // identifier and parent_identifier are COLLATE "C" columns already; payload_type
      // is the oneof discriminator, not a field of Resource.
      ["identifier", "text", false, (a: string) => `${a}.identifier`],
      ["payload_type", "text", false, (a: string) => `(${a}.payload_type COLLATE "C")`],
      ["parent_identifier", "text", true, (a: string) => `${a}.parent_identifier`],
      ["license", "text", true, (a: string) => `(${a}.license COLLATE "C")`],
      ["access_level", "text", false, (a: string) => `(${a}.access_level COLLATE "C")`],
      ["derived_from", "text_list", false, (a: string) => `${a}.derived_from`],
      ["created_at", "timestamptz", false, (a: string) => `${a}.created_at`],
      ["updated_at", "timestamptz", false, (a: string) => `${a}.updated_at`],
      ["version", "bigint", false, (a: string) => `${a}.version`],
    ] as const
  ).map(([name, type, nullable, expr]) => {
    if (name !== "payload_type" && !metadataFieldByName.has(name))
      throw new Error(`Resource has no metadata field ${name}`);
    return [name, { name, type, source: "metadata", nullable, expr } satisfies QueryField];
  }),
);

/** Metadata field names a query can name, in Resource order (children is Read-only). */
export const queryMetadataNames: readonly string[] = [...METADATA.keys()];

function payloadSqlType(f: FieldInfo): SqlType {
  switch (f.kind) {
    case "string":
      return f.rules.format === "date" ? "date" : "text";
    case "int32":
      return "int";
    case "int64":
      return "bigint";
    case "double":
      return "float8";
    case "bool":
      return "bool";
    case "double_map":
      return "json_map";
    case "string_list":
      return "text_list";
  }
}

const CASTS: Partial<Record<SqlType, string>> = { int: "int4", bigint: "int8", float8: "float8", bool: "boolean" };

function payloadField(f: FieldInfo): QueryField {
  const type = payloadSqlType(f);
  const key = literal(f.name);
  let expr: (a: string) => string;
  if (type === "json_map") expr = (a) => `(${a}.payload -> ${key})`;
  else if (type === "text_list") expr = (a) => `ARRAY(SELECT jsonb_array_elements_text(${a}.payload -> ${key}))`;
  else if (type === "text" || type === "date") expr = (a) => `((${a}.payload ->> ${key}) COLLATE "C")`;
  else {
    const cast = CASTS[type];
    expr = (a) => `((${a}.payload ->> ${key})::${cast})`;
  }
  return { name: f.name, type, source: "payload", nullable: true, expr, key: f.name };
}

/** Looks a field name up; unknown names (or payload names without a payload_type) are invalid_argument. */
export function resolveField(name: string, payloadType: PayloadType | undefined): QueryField {
  const meta = METADATA.get(name);
  if (meta) return meta;
  const info = payloadType?.fieldByName.get(name);
  if (info) return payloadField(info);
  if (payloadType === undefined) {
    throw invalidArgument(`unknown field ${JSON.stringify(name)}; payload fields need a payload_type`, "UNKNOWN_FIELD");
  }
  throw invalidArgument(`unknown field ${JSON.stringify(name)} for payload_type ${payloadType.name}`, "UNKNOWN_FIELD");
}

export function isScalar(f: QueryField): boolean {
  return f.type !== "text_list" && f.type !== "json_map";
}
