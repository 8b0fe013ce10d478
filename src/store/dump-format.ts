// The dump's format (docs/dump-format.md: change both together): its name
// and version, its sections in order and each one's record type and
// columns, the statements that read the versions' and the registry's
// columns, the header a reader checks, the kind of a version, and the
// SHA-256 the trailer carries over every line before it.
import { createHash, type Hash } from "node:crypto";
import type { Queryable } from "./db.js";
import { ts } from "./sql.js";

export const DUMP_FORMAT = "resource-store-dump";
/** The format this code writes, and the newest it reads (docs/dump-format.md); it reads versions 1 and 2 too. */
export const DUMP_FORMAT_VERSION = 3;

export const SECTIONS = [
  "versions",
  "registry_keys",
  "registry_key_chains",
  "registry_patients",
  "registry_studies",
  "counts_log",
] as const;

/**
 * The registry's hashed rows, one record kind a table: written and restored
 * by the same code, each table with the column its uid is scoped by (a
 * patient's datasource, a study's patient). Studies follow patients.
 */
export const REGISTRY_ROWS = [
  { record: "registry_patient", table: "registry_patients", scope: "datasource_id" },
  { record: "registry_study", table: "registry_studies", scope: "patient_identifier" },
] as const;

/** A dump or restore refused for a reason the operator can act on (the CLI prints the message alone). */
export class DumpError extends Error {
  override readonly name = "DumpError";
}

/** Which optional tables and columns this database has (sources and targets of several schema levels). */
export interface Shape {
  readonly actor: boolean;
  readonly registryKeys: boolean;
  readonly registryChains: boolean;
  /** The column naming a registry row's key chain: key_chain, or key_id before chains. */
  readonly keyColumn: "key_chain" | "key_id";
  /** The log of counts (migration 23) and where it starts (datasource_counts_since). */
  readonly countsLog: boolean;
  readonly migrations: number[];
}

export async function shapeOf(q: Queryable): Promise<Shape> {
  const { rows } = await q.query<{ table_name: string; column_name: string }>(
    `SELECT table_name, column_name FROM information_schema.columns
      WHERE table_schema = current_schema()
        AND table_name IN ('resources', 'resource_versions', 'registry_keys', 'registry_key_chains', 'registry_patients')`,
  );
  const has = (t: string, c: string) => rows.some((r) => r.table_name === t && r.column_name === c);
  const { rows: applied } = await q.query<{ id: number }>("SELECT id FROM schema_migrations ORDER BY id");
  return {
    actor: has("resources", "actor") && has("resource_versions", "actor"),
    registryKeys: has("registry_keys", "fingerprint"),
    registryChains: has("registry_key_chains", "key_ids"),
    keyColumn: has("registry_patients", "key_chain") ? "key_chain" : "key_id",
    countsLog: applied.some((r) => Number(r.id) === 23),
    migrations: applied.map((r) => Number(r.id)),
  };
}

/** Lines hashed as they go out (or come in): the trailer's SHA-256 covers every byte before it. */
export class Digest {
  private readonly hash: Hash = createHash("sha256");
  add(text: string | Buffer): void {
    this.hash.update(text);
  }
  hex(): string {
    return this.hash.digest("hex");
  }
}

export type Kind = "created" | "updated" | "deleted" | "restored";

/** The history API's kind of a version, from the version before it (docs/dump-format.md). */
export function kindOf(
  version: number,
  isDeleted: boolean,
  createdAt: string,
  prev: { isDeleted: boolean; createdAt: string } | undefined,
): Kind {
  if (version === 1 || prev === undefined) return "created";
  if (isDeleted) return "deleted";
  if (prev.isDeleted) return createdAt === prev.createdAt ? "restored" : "created";
  return "updated";
}

/** A JSON value of a column: null, or its JSON text (strings escaped by the database). */
const json = (expr: string): string => `coalesce(to_json(${expr})::text, 'null')`;
/** A timestamp column as a JSON string (or null), as the API writes it. */
const jsonTs = (expr: string): string => `coalesce('"' || ${ts(expr)} || '"', 'null')`;

/** kindOf's rule over the history row `h` and the version before it (`h.prev_is_deleted`, `h.prev_created_at`: null for none). */
const KIND_SQL = `CASE WHEN h.version = 1 OR h.prev_is_deleted IS NULL THEN 'created' WHEN h.is_deleted THEN 'deleted'
      WHEN h.prev_is_deleted THEN CASE WHEN h.created_at = h.prev_created_at THEN 'restored' ELSE 'created' END
      ELSE 'updated' END`;
/** A version's JSON text: a number up to 2^53, else a string. */
const VERSION_SQL = `CASE WHEN h.version <= 9007199254740991 THEN h.version::text ELSE '"' || h.version || '"' END`;

/** How a value of a column is written (RecordEncoder). */
export const STRING = 0; // text, as a JSON string
export const RAW = 1; // text that is already JSON
export const STAMP = 2; // a timestamp as a JSON string; infinity (an open period) as null
export const BOOL = 3;
const KIND = 4; // kindOf, from this row and the version before it

/**
 * The columns of the `versions` section (docs/dump-format.md), in the order
 * of the section line and of every record, and how each is written: by the
 * client from PostgreSQL's binary COPY of the stored value (`copy`, written
 * as `encoding` says; the kind has no column, the client derives it), or
 * as JSON text by the statement itself on PGlite (`sql`). The two give the
 * same bytes. The payload is last, so a reader finds its text at the end
 * of the line.
 */
export interface RecordColumn {
  readonly name: string;
  readonly copy: string | undefined;
  readonly encoding: number;
  readonly sql: string;
}
export const versionColumns = (actor: string): readonly RecordColumn[] => [
  { name: "identifier", copy: "h.identifier", encoding: STRING, sql: json("h.identifier") },
  { name: "version", copy: VERSION_SQL, encoding: RAW, sql: VERSION_SQL },
  { name: "from", copy: "h.tx_from", encoding: STAMP, sql: jsonTs("h.tx_from") },
  {
    name: "to",
    copy: "h.tx_to",
    encoding: STAMP,
    sql: `CASE WHEN h.tx_to = 'infinity' THEN 'null' ELSE ${jsonTs("h.tx_to")} END`,
  },
  { name: "kind", copy: undefined, encoding: KIND, sql: `'"' || ${KIND_SQL} || '"'` },
  { name: "actor", copy: actor, encoding: STRING, sql: json(actor) },
  { name: "payload_type", copy: "h.payload_type", encoding: STRING, sql: json("h.payload_type") },
  { name: "parent_identifier", copy: "h.parent_identifier", encoding: STRING, sql: json("h.parent_identifier") },
  { name: "license", copy: "h.license", encoding: STRING, sql: json("h.license") },
  { name: "access_level", copy: "h.access_level", encoding: STRING, sql: json("h.access_level") },
  { name: "derived_from", copy: "to_json(h.derived_from)::text", encoding: RAW, sql: json("h.derived_from") },
  { name: "created_at", copy: "h.created_at", encoding: STAMP, sql: jsonTs("h.created_at") },
  { name: "is_deleted", copy: "h.is_deleted", encoding: BOOL, sql: "h.is_deleted::text" },
  { name: "deleted_by", copy: "h.deleted_by", encoding: STAMP, sql: jsonTs("h.deleted_by") },
  { name: "payload", copy: "h.payload::text", encoding: RAW, sql: "h.payload::text" },
];
/** The columns' names: the same whatever the source's schema (a source without actors writes null). */
const VERSION_COLUMN_NAMES: readonly string[] = versionColumns("NULL").map((c) => c.name);

/** A record of the versions section built by the statement (PGlite): its JSON array, the kind too. */
export const versionLineSql = (actor: string): string =>
  `'[' || ${versionColumns(actor)
    .map((c) => c.sql)
    .join(" || ',' || ")} || ']'`;

/**
 * The fields of PostgreSQL's binary COPY of a version: every stored value as
 * it is (timestamps as integers, strings unescaped), so the server formats
 * nothing but the version's JSON text and derived_from; no kind (the
 * client derives it), but for an incremental dump the version before each
 * (`prev_is_deleted`, `prev_created_at`) last.
 */
export function versionCopySql(actor: string, incremental: boolean): string {
  const fields = versionColumns(actor).flatMap((c) => (c.copy === undefined ? [] : [c.copy]));
  if (incremental) fields.push("h.prev_is_deleted", "h.prev_created_at");
  return fields.join(", ");
}

/**
 * The registry's sections (docs/dump-format.md): hashes and fingerprints,
 * never a key; each its columns, the statement that reads them in that order
 * (undefined when the source has no such table), written whole, incremental
 * dump or not.
 */
interface RegistrySection {
  readonly section: (typeof SECTIONS)[number];
  readonly records: string;
  readonly columns: readonly string[];
  readonly sql: (shape: Shape) => string | undefined;
}
export const REGISTRY_SECTIONS: readonly RegistrySection[] = [
  {
    section: "registry_keys",
    records: "registry_key",
    columns: ["key_id", "fingerprint", "recorded_at"],
    sql: (shape) =>
      shape.registryKeys
        ? `SELECT key_id, encode(fingerprint, 'hex') AS fingerprint, ${ts("recorded_at")} AS recorded_at FROM registry_keys ORDER BY key_id`
        : undefined,
  },
  {
    section: "registry_key_chains",
    records: "registry_key_chain",
    columns: ["chain", "key_ids"],
    sql: (shape) => (shape.registryChains ? "SELECT chain, key_ids FROM registry_key_chains ORDER BY seq" : undefined),
  },
  ...REGISTRY_ROWS.map((t) => ({
    section: t.table,
    records: t.record,
    columns: ["identifier", t.scope, "uid_hash", "key_chain", "registered_at"],
    sql: (
      shape: Shape,
    ) => `SELECT identifier, ${t.scope}, encode(uid_hash, 'hex') AS uid_hash, ${shape.keyColumn} AS key_chain,
        ${ts("registered_at")} AS registered_at FROM ${t.table} ORDER BY identifier`,
  })),
];

/** A count as JSON: a number when it is an integer up to 2^53, else its text as a string. */
const countJson = (x: string): string =>
  `CASE WHEN ${x} = trunc(${x}) AND abs(${x}) <= 9007199254740991 THEN trunc(${x})::text ELSE '"' || ${x}::text || '"' END`;

/**
 * The log of counts (section `counts_log`, format version 3): the rows of
 * datasource_counts_log in its key order (an incremental dump's: those
 * after its `since`), written by a dump of a store that keeps one, so that
 * the copy answers statistics at every earlier point from the log as the
 * source does, not from its history (docs/dump-format.md). The header's
 * `counts_log.since` is where the source's log begins. Its columns, and
 * how each is written, as versionColumns has it: by the
 * client from a binary COPY on PostgreSQL (RecordEncoder: strings and
 * stamps; the counts' JSON text from the statement), or in the line the
 * statement builds on PGlite; the same bytes.
 */
export const countsLogColumns: readonly RecordColumn[] = [
  { name: "datasource_id", copy: "l.datasource_id", encoding: STRING, sql: json("l.datasource_id") },
  { name: "payload_type", copy: "l.payload_type", encoding: STRING, sql: json("l.payload_type") },
  { name: "access_level", copy: "l.access_level", encoding: STRING, sql: json("l.access_level") },
  { name: "tx_from", copy: "l.tx_from", encoding: STAMP, sql: jsonTs("l.tx_from") },
  {
    name: "resources",
    copy: countJson("l.resources::numeric"),
    encoding: RAW,
    sql: countJson("l.resources::numeric"),
  },
  { name: "total_bytes", copy: countJson("l.total_bytes"), encoding: RAW, sql: countJson("l.total_bytes") },
  { name: "last_updated_at", copy: "l.last_updated_at", encoding: STAMP, sql: jsonTs("l.last_updated_at") },
];

export const COUNTS_LOG_COLUMNS: readonly string[] = countsLogColumns.map((c) => c.name);

/**
 * The log's records in its key order (its primary key: an index walk), an
 * incremental dump's those after its `since` ($1): each line built by the
 * statement (`line`), or the values for a binary COPY (`copy`).
 */
export const countsLogSql = (incremental: boolean, form: "line" | "copy"): string =>
  `SELECT ${
    form === "line"
      ? `'[' || ${countsLogColumns.map((c) => c.sql).join(" || ',' || ")} || ']' AS line`
      : countsLogColumns.map((c) => c.copy).join(", ")
  }
     FROM datasource_counts_log l${incremental ? " WHERE l.tx_from > $1::timestamptz" : ""}
    ORDER BY l.datasource_id, l.payload_type, l.access_level, l.tx_from`;

/** Each section's record type and columns, in the order of SECTIONS: what a version-2 reader expects. */
export const SECTION_COLUMNS: ReadonlyMap<string, { readonly records: string; readonly columns: readonly string[] }> =
  new Map([
    ["versions", { records: "version", columns: VERSION_COLUMN_NAMES }],
    ...REGISTRY_SECTIONS.map((r) => [r.section, { records: r.records, columns: r.columns }] as const),
    ["counts_log", { records: "counts_log_row", columns: COUNTS_LOG_COLUMNS }],
  ]);

/** The line that opens a section (format version 2): its name, its records' type, their columns. */
export const sectionLine = (section: string): string => {
  const { records, columns } = SECTION_COLUMNS.get(section)!;
  return `${JSON.stringify({ record: "section", section, records, columns })}\n`;
};

export interface Header {
  record: "header";
  format: string;
  format_version: number;
  since: string | null;
  until: string | null;
  sections: string[];
  /** Format version 3, a dump of a store with a log of counts: where the log begins (null: at the first write). */
  counts_log?: { since: string | null };
}

export function checkHeader(h: unknown): Header {
  const header = h as Partial<Header> | null;
  if (header === null || typeof header !== "object" || header.record !== "header" || header.format !== DUMP_FORMAT) {
    throw new DumpError("not a resource-store dump (its first line is not a dump header)");
  }
  if (
    typeof header.format_version !== "number" ||
    !Number.isInteger(header.format_version) ||
    header.format_version < 1
  ) {
    throw new DumpError("the dump header has no valid format_version");
  }
  if (header.format_version > DUMP_FORMAT_VERSION) {
    throw new DumpError(
      `the dump is format version ${header.format_version}, written by a newer resource-store; this one reads up to ${DUMP_FORMAT_VERSION}: upgrade it to restore this dump`,
    );
  }
  return header as Header;
}
