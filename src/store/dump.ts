// Dump and restore of a whole store (docs/dump-format.md): every version of every
// resource with its period, and the registry's rows and key fingerprints, as
// one gzip stream of NDJSON lines (format version 2: each section's columns
// named once, each record an array of values) closed by a trailer with
// counts and a SHA-256. The format, and why this works on the database and
// not over the API, is docs/dump-format.md: change both together.
//
// Memory stays flat: the writer reads through a server-side cursor in one
// read-only snapshot and writes as it reads (the gzip stream's backpressure
// holds the cursor); the reader parses line by line and inserts in batches,
// all in one transaction that commits only once the trailer has checked out.
import { createHash, type Hash } from "node:crypto";
import { Readable, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip, createGzip } from "node:zlib";
import type { Db, Queryable } from "./db.js";
import { pauseTreeCounts, rebuildTreeCounts } from "./tree-counts.js";
import { ts } from "./sql.js";
import { inlineParams } from "./copy-out.js";
import { rebuildAttribution } from "./attribution.js";
import { parseAsOf } from "../time.js";
import { COPY_PARTIAL, COPY_TRAILER, copyHeaderEnd, readCopyRow } from "../copy-binary.js";

export const DUMP_FORMAT = "resource-store-dump";
/** The format this code writes, and the newest it reads (docs/dump-format.md); it reads version 1 too. */
export const DUMP_FORMAT_VERSION = 2;

const SECTIONS = ["versions", "registry_keys", "registry_key_chains", "registry_patients", "registry_studies"] as const;

/**
 * The registry's hashed rows, one record kind a table: written and restored
 * by the same code, each table with the column its uid is scoped by (a
 * patient's datasource, a study's patient). Studies follow patients.
 */
const REGISTRY_ROWS = [
  { record: "registry_patient", table: "registry_patients", scope: "datasource_id" },
  { record: "registry_study", table: "registry_studies", scope: "patient_identifier" },
] as const;

/** A dump or restore refused for a reason the operator can act on (the CLI prints the message alone). */
export class DumpError extends Error {
  override readonly name = "DumpError";
}

export interface DumpOptions {
  /** The `until` of an earlier dump: write only what changed after it (docs/dump-format.md, incremental dumps). */
  readonly since?: string;
  /** Rows a cursor fetch (default 10,000). */
  readonly batchSize?: number;
  /** `source.service_version` of the header. */
  readonly serviceVersion?: string;
  /** Called after each batch of versions with the number written so far. */
  readonly onVersions?: (written: number) => void;
}

export interface DumpSummary {
  readonly versions: number;
  readonly until: string;
  readonly counts: Readonly<Record<string, number>>;
}

/** Which optional tables and columns this database has (sources and targets of several schema levels). */
interface Shape {
  readonly actor: boolean;
  readonly registryKeys: boolean;
  readonly registryChains: boolean;
  /** The column naming a registry row's key chain: key_chain, or key_id before chains. */
  readonly keyColumn: "key_chain" | "key_id";
  readonly migrations: number[];
}

async function shapeOf(q: Queryable): Promise<Shape> {
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
    migrations: applied.map((r) => Number(r.id)),
  };
}

/** Lines hashed as they go out (or come in): the trailer's SHA-256 covers every byte before it. */
class Digest {
  private readonly hash: Hash = createHash("sha256");
  add(text: string | Buffer): void {
    this.hash.update(text);
  }
  hex(): string {
    return this.hash.digest("hex");
  }
}

type Kind = "created" | "updated" | "deleted" | "restored";

/** The history API's kind of a version, from the version before it (docs/dump-format.md). */
export function kindOf(version: number, isDeleted: boolean, createdAt: string, prev: { isDeleted: boolean; createdAt: string } | undefined): Kind {
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

/** How a value of a version column is written (VersionEncoder). */
const STRING = 0; // text, as a JSON string
const RAW = 1; // text that is already JSON
const STAMP = 2; // a timestamp as a JSON string; infinity (an open period) as null
const BOOL = 3;
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
interface VersionColumn {
  readonly name: string;
  readonly copy: string | undefined;
  readonly encoding: number;
  readonly sql: string;
}
const versionColumns = (actor: string): readonly VersionColumn[] => [
  { name: "identifier", copy: "h.identifier", encoding: STRING, sql: json("h.identifier") },
  { name: "version", copy: VERSION_SQL, encoding: RAW, sql: VERSION_SQL },
  { name: "from", copy: "h.tx_from", encoding: STAMP, sql: jsonTs("h.tx_from") },
  { name: "to", copy: "h.tx_to", encoding: STAMP, sql: `CASE WHEN h.tx_to = 'infinity' THEN 'null' ELSE ${jsonTs("h.tx_to")} END` },
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
const versionLineSql = (actor: string): string => `'[' || ${versionColumns(actor).map((c) => c.sql).join(" || ',' || ")} || ']'`;

/**
 * The fields of PostgreSQL's binary COPY of a version: every stored value as
 * it is (timestamps as integers, strings unescaped), so the server formats
 * nothing but the version's JSON text and derived_from; no kind (the
 * client derives it), but for an incremental dump the version before each
 * (`prev_is_deleted`, `prev_created_at`) last.
 */
function versionCopySql(actor: string, incremental: boolean): string {
  const fields = versionColumns(actor).flatMap((c) => (c.copy === undefined ? [] : [c.copy]));
  if (incremental) fields.push("h.prev_is_deleted", "h.prev_created_at");
  return fields.join(", ");
}

/** Microseconds from the Unix epoch to PostgreSQL's (2000-01-01), in milliseconds. */
const PG_EPOCH_MS = 946_684_800_000;

const latin1 = (text: string): Buffer => Buffer.from(text, "latin1");
const NULL_BYTES = latin1("null");
const TRUE_BYTES = latin1("true");
const FALSE_BYTES = latin1("false");
const KIND_BYTES: Record<Kind, Buffer> = {
  created: latin1('"created"'),
  updated: latin1('"updated"'),
  deleted: latin1('"deleted"'),
  restored: latin1('"restored"'),
};

/** Bytes written one after another into a buffer that grows as needed. */
class ByteWriter {
  buf: Buffer;
  pos = 0;
  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }
  room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(bigger, 0, 0, this.pos);
    this.buf = bigger;
  }
  byte(b: number): void {
    this.room(1);
    this.buf[this.pos++] = b;
  }
  // Short pieces are copied by a loop: a native copy's call costs more than a few dozen bytes.
  put(bytes: Buffer): void {
    this.putRange(bytes, 0, bytes.length);
  }
  putRange(src: Buffer, start: number, end: number): void {
    this.room(end - start);
    if (end - start > 64) {
      this.pos += src.copy(this.buf, this.pos, start, end);
      return;
    }
    const buf = this.buf;
    let pos = this.pos;
    for (let i = start; i < end; i++) buf[pos++] = src[i]!;
    this.pos = pos;
  }
  /** src[start, end) as a JSON string: as it is between quotes unless a byte needs escaping. */
  putJsonString(src: Buffer, start: number, end: number): void {
    this.room(end - start + 2);
    const buf = this.buf;
    let pos = this.pos;
    buf[pos++] = 0x22;
    for (let i = start; i < end; i++) {
      const b = src[i]!;
      buf[pos++] = b;
      if (b < 0x20 || b === 0x22 || b === 0x5c) {
        // JSON.stringify escapes what PostgreSQL's to_json does, in the same forms; every such byte is ASCII,
        // so the text can go through as latin1, one character a byte, UTF-8 unchanged.
        const text = JSON.stringify(src.toString("latin1", start, end));
        this.room(text.length);
        this.pos += this.buf.write(text, this.pos, "latin1");
        return;
      }
    }
    buf[pos++] = 0x22;
    this.pos = pos;
  }
}

/**
 * A timestamp as the API writes it (sql.ts `ts`), quoted, from PostgreSQL's
 * binary value (microseconds since 2000-01-01 UTC): the second's text is
 * kept for the next stamp, which is often in the same second.
 */
function putStamp(out: ByteWriter, micros: number, cache: { second: number; text: Buffer }): void {
  const second = Math.floor(micros / 1_000_000);
  if (second !== cache.second) {
    cache.second = second;
    cache.text = latin1(`"${new Date(second * 1000 + PG_EPOCH_MS).toISOString().slice(0, 19)}.`);
  }
  out.put(cache.text);
  out.room(8);
  let fraction = micros - second * 1_000_000;
  const at = out.pos;
  for (let k = 5; k >= 0; k--) {
    out.buf[at + k] = 48 + (fraction % 10);
    fraction = Math.floor(fraction / 10);
  }
  out.buf[at + 6] = 0x5a; // Z
  out.buf[at + 7] = 0x22;
  out.pos = at + 8;
}

/** Whether two fields (start, end) of COPY rows hold the same bytes. */
function sameBytes(a: Buffer, as: number, ae: number, b: Buffer, bs: number, be: number): boolean {
  if (ae - as !== be - bs) return false;
  for (let i = 0; i < ae - as; i++) if (a[as + i] !== b[bs + i]) return false;
  return true;
}

/**
 * PostgreSQL's binary COPY rows of versionCopySql, as records of the
 * versions section: fed chunks as they come (a row may span two), it
 * returns the bytes of the complete rows of each and counts them. Each
 * column is written as versionColumns says. Strings are escaped by
 * JSON.stringify, which escapes exactly what PostgreSQL's to_json does (the
 * quote, the backslash, control characters, in the same forms), so the
 * records are those the statement of the embedded store builds, byte for
 * byte. The text is handled as latin1, one character a byte: UTF-8 text
 * passes through unchanged (every byte JSON escapes is ASCII, and a
 * multi-byte character's bytes are all above 0x7f), and neither decoding
 * nor encoding validates or converts anything.
 *
 * The kind is kindOf's, from the version before: in a full dump the row
 * before, when it is of the same identifier (the rows come in key order,
 * every version of each); in an incremental one the last two fields.
 */
class VersionEncoder {
  private rest: Buffer | undefined;
  private headerRead = false;
  private readonly cache = { second: Number.NaN, text: Buffer.alloc(0) };
  /** For each output column, its COPY field (-1: the kind) and how it is written. */
  private readonly field: number[] = [];
  private readonly encoding: number[] = [];
  private readonly fields: number;
  /** The row being read: each COPY field's start and length (-1: null). */
  private readonly at: Int32Array;
  private readonly len: Int32Array;
  private readonly ix: { identifier: number; version: number; created: number; deleted: number };
  private readonly incremental: boolean;
  /** The output column of the period's end: an open one (infinity) is a current version. */
  private readonly toColumn: number;
  // The row before, in a full dump: its identifier's bytes, whether it was a tombstone, its created_at.
  private prevId = Buffer.alloc(64);
  private prevIdLength = -1;
  private prevDeleted = false;
  private prevCreatedHi = 0;
  private prevCreatedLo = 0;
  private prevCreatedNull = true;
  versions = 0;
  current = 0;
  ended = false;

  constructor(columns: readonly VersionColumn[], incremental: boolean) {
    let f = 0;
    for (const c of columns) {
      this.field.push(c.copy === undefined ? -1 : f++);
      this.encoding.push(c.encoding);
    }
    const at = (name: string): number => this.field[columns.findIndex((c) => c.name === name)]!;
    this.ix = { identifier: at("identifier"), version: at("version"), created: at("created_at"), deleted: at("is_deleted") };
    this.incremental = incremental;
    this.toColumn = columns.findIndex((c) => c.name === "to");
    this.fields = f + (incremental ? 2 : 0);
    this.at = new Int32Array(this.fields);
    this.len = new Int32Array(this.fields);
  }

  push(chunk: Buffer): Buffer | undefined {
    const buf = this.rest === undefined ? chunk : Buffer.concat([this.rest, chunk]);
    this.rest = undefined;
    let pos = 0;
    if (!this.headerRead) {
      pos = copyHeaderEnd(buf, buf.length);
      if (pos === COPY_PARTIAL) {
        this.rest = buf;
        return undefined;
      }
      this.headerRead = true;
    }
    // A record is shorter than its row but for quotes and escapes: room for both and then some, grown if not.
    const out = new ByteWriter(buf.length + (buf.length >> 1) + 4096);
    const { at, len } = this;
    for (;;) {
      const next = readCopyRow(buf, pos, buf.length, this.fields, at, len);
      if (next === COPY_PARTIAL) break;
      if (next === COPY_TRAILER) {
        this.ended = true;
        pos += 2;
        break;
      }
      this.record(out, buf, at, len);
      pos = next;
    }
    if (pos < buf.length) this.rest = buf.subarray(pos);
    return out.pos === 0 ? undefined : out.buf.subarray(0, out.pos);
  }

  /** A timestamp field as a JSON string, or null (infinity: null too, an open period). */
  private stamp(out: ByteWriter, buf: Buffer, at: number): boolean {
    if (at === -1) {
      out.put(NULL_BYTES);
      return false;
    }
    const hi = buf.readInt32BE(at);
    const lo = buf.readUInt32BE(at + 4);
    if (hi === 0x7fffffff && lo === 0xffffffff) {
      out.put(NULL_BYTES);
      return true;
    }
    putStamp(out, hi * 4_294_967_296 + lo, this.cache);
    return false;
  }

  /** kindOf, over this row and the version before it. */
  private kind(buf: Buffer, s: Int32Array, l: Int32Array): Kind {
    const { identifier, version, created, deleted } = this.ix;
    const first = l[version] === 1 && buf[s[version]!] === 0x31;
    const isDeleted = buf[s[deleted]!] === 1;
    let prevDeleted: boolean;
    let same: boolean; // created_at equal to the version before's
    if (this.incremental) {
      const pd = s[this.fields - 2]!;
      const pc = s[this.fields - 1]!;
      if (pd === -1) return "created";
      prevDeleted = buf[pd] === 1;
      same = pc !== -1 && s[created] !== -1 && sameBytes(buf, pc, pc + 8, buf, s[created]!, s[created]! + 8);
    } else {
      // Remember this row for the next; compare with the one before first.
      const idStart = s[identifier]!;
      const idEnd = idStart + l[identifier]!;
      const sameId = this.prevIdLength !== -1 && sameBytes(this.prevId, 0, this.prevIdLength, buf, idStart, idEnd);
      if (!sameId) {
        if (this.prevId.length < idEnd - idStart) this.prevId = Buffer.alloc(Math.max(2 * this.prevId.length, idEnd - idStart));
        buf.copy(this.prevId, 0, idStart, idEnd);
        this.prevIdLength = idEnd - idStart;
      }
      const hadPrev = sameId;
      prevDeleted = this.prevDeleted;
      const c = s[created]!;
      const createdNull = c === -1;
      const hi = createdNull ? 0 : buf.readInt32BE(c);
      const lo = createdNull ? 0 : buf.readUInt32BE(c + 4);
      same = !createdNull && !this.prevCreatedNull && hi === this.prevCreatedHi && lo === this.prevCreatedLo;
      this.prevDeleted = isDeleted;
      this.prevCreatedNull = createdNull;
      this.prevCreatedHi = hi;
      this.prevCreatedLo = lo;
      if (!hadPrev) return "created";
    }
    if (first) return "created";
    if (isDeleted) return "deleted";
    if (prevDeleted) return same ? "restored" : "created";
    return "updated";
  }

  private record(out: ByteWriter, buf: Buffer, s: Int32Array, l: Int32Array): void {
    out.byte(0x5b); // [
    const field = this.field;
    const encoding = this.encoding;
    for (let c = 0; c < field.length; c++) {
      if (c > 0) out.byte(0x2c); // ,
      const f = field[c]!;
      switch (encoding[c]) {
        case STRING:
          if (s[f] === -1) out.put(NULL_BYTES);
          else out.putJsonString(buf, s[f]!, s[f]! + l[f]!);
          break;
        case RAW:
          if (s[f] === -1) out.put(NULL_BYTES);
          else out.putRange(buf, s[f]!, s[f]! + l[f]!);
          break;
        case STAMP:
          if (this.stamp(out, buf, s[f]!) && c === this.toColumn) this.current++;
          break;
        case BOOL:
          out.put(s[f] === -1 ? NULL_BYTES : buf[s[f]!] === 1 ? TRUE_BYTES : FALSE_BYTES);
          break;
        default:
          out.put(KIND_BYTES[this.kind(buf, s, l)]);
      }
    }
    out.byte(0x5d); // ]
    out.byte(0x0a);
    this.versions++;
  }
}

const NEWLINE = 10;

/**
 * Rows of `sql` through a cursor of this transaction, `batch` at a time. The
 * next batch is fetched while the caller writes out this one: the database
 * reads and formats while this process builds lines and compresses.
 */
async function* cursorRows<R>(tx: Queryable, name: string, sql: string, params: readonly unknown[], batch: number): AsyncGenerator<R[]> {
  await tx.query(`DECLARE ${name} NO SCROLL CURSOR FOR ${sql}`, params);
  const fetch = (): Promise<R[]> => {
    const p = tx.query<R>(`FETCH ${batch} FROM ${name}`).then((r) => r.rows);
    // Awaited below, unless the reader stops first (then the transaction ends and this fails unseen).
    p.catch(() => {});
    return p;
  };
  let next = fetch();
  for (;;) {
    const rows = await next;
    if (rows.length === 0) break;
    const more = rows.length === batch;
    if (more) next = fetch();
    yield rows;
    if (!more) break;
  }
  await tx.query(`CLOSE ${name}`);
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
const REGISTRY_SECTIONS: readonly RegistrySection[] = [
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
    sql: (shape: Shape) => `SELECT identifier, ${t.scope}, encode(uid_hash, 'hex') AS uid_hash, ${shape.keyColumn} AS key_chain,
        ${ts("registered_at")} AS registered_at FROM ${t.table} ORDER BY identifier`,
  })),
];

/** Each section's record type and columns, in the order of SECTIONS: what a version-2 reader expects. */
const SECTION_COLUMNS: ReadonlyMap<string, { readonly records: string; readonly columns: readonly string[] }> = new Map([
  ["versions", { records: "version", columns: VERSION_COLUMN_NAMES }],
  ...REGISTRY_SECTIONS.map((r) => [r.section, { records: r.records, columns: r.columns }] as const),
]);

/** The line that opens a section (format version 2): its name, its records' type, their columns. */
const sectionLine = (section: string): string => {
  const { records, columns } = SECTION_COLUMNS.get(section)!;
  return `${JSON.stringify({ record: "section", section, records, columns })}\n`;
};

/** The lines of a dump, header to trailer, read in `tx` (one read-only snapshot). */
async function* dumpLines(tx: Queryable, db: Db, opts: DumpOptions, done: (s: DumpSummary) => void): AsyncGenerator<string | Buffer> {
  const batch = opts.batchSize ?? 10_000;
  const shape = await shapeOf(tx);
  const { rows: clock } = await tx.query<{ until: string | null; server: string }>(
    `SELECT CASE WHEN last = '-infinity' THEN NULL ELSE ${ts("last")} END AS until, version() AS server FROM clock`,
  );
  const until = clock[0]?.until ?? null;
  if (opts.since !== undefined && until !== null) {
    const { rows } = await tx.query<{ ok: boolean }>("SELECT $1::timestamptz <= $2::timestamptz AS ok", [opts.since, until]);
    if (rows[0]?.ok !== true) throw new DumpError(`since ${opts.since} is after the store's last write (${until})`);
  }
  const digest = new Digest();
  const counts: Record<string, number> = { version: 0, version_current: 0, registry_key: 0, registry_key_chain: 0, registry_patient: 0, registry_study: 0 };
  const emit = <T extends string | Buffer>(line: T): T => {
    digest.add(line);
    return line;
  };
  yield emit(
    `${JSON.stringify({
      record: "header",
      format: DUMP_FORMAT,
      format_version: DUMP_FORMAT_VERSION,
      written_at: new Date().toISOString(),
      source: { backend: db.kind, server: clock[0]?.server ?? "", service_version: opts.serviceVersion ?? "", migrations: shape.migrations },
      since: opts.since ?? null,
      until,
      sections: SECTIONS,
    })}\n`,
  );

  // --- versions: (identifier, version) order, both tables' primary keys.
  yield emit(sectionLine("versions"));
  const incremental = opts.since !== undefined;
  const actor = shape.actor ? "h.actor" : "NULL::text";
  const params = incremental ? [opts.since] : [];
  // The history, and for an incremental dump the version before each (its first version of an identifier may
  // follow one the dump does not hold): the history's row before it.
  const history = incremental
    ? `SELECT h.*, p.is_deleted AS prev_is_deleted, p.created_at AS prev_created_at
         FROM resource_history h LEFT JOIN resource_history p ON p.identifier = h.identifier AND p.version = h.version - 1
        WHERE h.tx_from > $1::timestamptz OR (h.tx_to > $1::timestamptz AND h.tx_to < 'infinity')`
    : "SELECT h.* FROM resource_history h";
  // Current versions are those of `resources` in the dump (their period began after `since`): counted apart,
  // and checked against the records written.
  const { rows: currentRows } = await tx.query<{ n: string }>(
    `SELECT count(*) AS n FROM resources${incremental ? " WHERE updated_at > $1::timestamptz" : ""}`,
    params,
  );
  counts.version_current = Number(currentRows[0]!.n);
  if (tx.copyTo !== undefined) {
    // PostgreSQL: the stored values by binary COPY (the server formats nothing, nor derives the kind: a window
    // over the whole history cost a quarter of its time), written out here chunk by chunk.
    const encoder = new VersionEncoder(versionColumns(actor), incremental);
    const copySql = `SELECT ${versionCopySql(actor, incremental)} FROM (${history}) h ORDER BY h.identifier, h.version`;
    for await (const chunk of tx.copyTo(`COPY (${inlineParams(copySql, params)}) TO STDOUT (FORMAT binary)`) as AsyncIterable<Buffer>) {
      const text = encoder.push(chunk);
      if (text !== undefined) {
        counts.version = encoder.versions;
        yield emit(text);
        opts.onVersions?.(counts.version);
      }
    }
    if (!encoder.ended) throw new Error("the COPY of the versions ended before its trailer");
    if (encoder.current !== counts.version_current) throw new Error(`the dump wrote ${encoder.current} current versions, the store holds ${counts.version_current}`);
  } else {
    // PGlite: the statement builds each record, its kind from a window over the history's key order.
    const source = incremental
      ? history
      : `SELECT h.*, lag(h.is_deleted) OVER w AS prev_is_deleted, lag(h.created_at) OVER w AS prev_created_at
           FROM resource_history h WINDOW w AS (PARTITION BY h.identifier ORDER BY h.version)`;
    const sql = `SELECT ${versionLineSql(actor)} AS line FROM (${source}) h ORDER BY h.identifier, h.version`;
    for await (const rows of cursorRows<{ line: string }>(tx, "dump_versions", sql, params, batch)) {
      // One chunk a batch: the gzip stream and the digest take one write each, not one a line.
      let chunk = "";
      for (const r of rows) chunk += `${r.line}\n`;
      counts.version! += rows.length;
      yield emit(chunk);
      opts.onVersions?.(counts.version!);
    }
  }

  // --- the registry: one section a table.
  for (const r of REGISTRY_SECTIONS) {
    yield emit(sectionLine(r.section));
    const sql = r.sql(shape);
    if (sql === undefined) continue;
    for await (const rows of cursorRows<Record<string, unknown>>(tx, `dump_${r.section}`, sql, [], batch)) {
      let chunk = "";
      for (const row of rows) chunk += `${JSON.stringify(r.columns.map((c) => row[c]))}\n`;
      counts[r.records]! += rows.length;
      yield emit(chunk);
    }
  }

  yield `${JSON.stringify({ record: "trailer", counts, sha256: digest.hex() })}\n`;
  done({ versions: counts.version!, until: until ?? "", counts });
}

/**
 * A `since` the dump can take: an RFC 3339 stamp with `Z` or an offset (the
 * `until` of an earlier dump). A stamp without a zone would be read in the
 * database session's time zone, and a word ("yesterday") was written into
 * the header as it was, dumping everything: both are refused.
 */
export function checkSince(since: string): void {
  try {
    parseAsOf(since);
  } catch {
    throw new DumpError(
      `since ${JSON.stringify(since)} is not an RFC 3339 timestamp with Z or an offset: give the \`until\` of an earlier dump (e.g. 2026-11-26T15:06:20.000001Z)`,
    );
  }
}

/** Writes a dump of `db` to `out` (a file stream; ended here). */
export async function writeDump(db: Db, out: Writable, opts: DumpOptions = {}): Promise<DumpSummary> {
  if (opts.since !== undefined) checkSince(opts.since);
  let summary: DumpSummary | undefined;
  await db.transaction(
    async (tx) => {
      await pipeline(Readable.from(dumpLines(tx, db, opts, (s) => (summary = s))), createGzip(), out);
    },
    { readOnlySnapshot: true },
  );
  if (summary === undefined) throw new Error("the dump ended without its trailer");
  return summary;
}

// --- restore ------------------------------------------------------------------

export interface RestoreOptions {
  /** Versions an INSERT (default 5,000). */
  readonly batchSize?: number;
  /** Called after each batch with the versions loaded so far and the compressed bytes read. */
  readonly onProgress?: (versions: number, bytesRead: number) => void;
}

export interface RestoreSummary {
  readonly versions: number;
  readonly until: string;
  readonly since: string | null;
}

interface Header {
  record: "header";
  format: string;
  format_version: number;
  since: string | null;
  until: string | null;
  sections: string[];
}

interface VersionRecord {
  record: "version";
  identifier: string;
  version: number | string;
  from: string;
  to: string | null;
  kind: Kind;
  actor: string | null;
  payload_type: string;
  parent_identifier: string | null;
  license: string | null;
  access_level: string;
  derived_from: string[];
  payload: unknown;
  created_at: string;
  is_deleted: boolean;
  deleted_by: string | null;
}

/** A value in COPY's text format: `\\N` for null, else its text with backslash, tab, newline and carriage return escaped. */
function copyValue(v: unknown): string {
  if (v === null || v === undefined) return "\\N";
  if (typeof v === "object" || typeof v === "function") throw new DumpError("a version field holds a list or an object where the format has one value; nothing was restored");
  const s = typeof v === "string" ? v : typeof v === "symbol" ? v.toString() : `${v as number | boolean | bigint}`;
  return COPY_SPECIAL.test(s) ? s.replace(COPY_SPECIAL_ALL, (c) => COPY_ESCAPES[c]!) : s;
}
const COPY_SPECIAL = /[\\\t\n\r]/;
const COPY_SPECIAL_ALL = /[\\\t\n\r]/g;
const COPY_ESCAPES: Record<string, string> = { "\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r" };

/** A text[] literal of strings (then escaped for COPY). */
function arrayLiteral(xs: readonly unknown[]): string {
  return `{${xs.map((x) => `"${String(x).replace(/[\\"]/g, "\\$&")}"`).join(",")}}`;
}

/** The index of the quote that closes the JSON string opening at `open` in `line` (one preceded by an even run of backslashes), or -1. */
function closingQuote(line: string, open: number): number {
  let j = open;
  for (;;) {
    j = line.indexOf('"', j + 1);
    if (j === -1) return -1;
    let k = j - 1;
    while (line.charCodeAt(k) === 92) k--;
    if ((j - 1 - k) % 2 === 0) return j;
  }
}

/**
 * The text of the top-level member "payload" of a JSON object line, as it
 * is (the writer wrote the stored jsonb's own text: its numbers keep their
 * digits, which JSON.parse and JSON.stringify would not). Strings are
 * skipped whole by their quotes; the last member of that name wins, as in
 * JSON.parse. Undefined when the line names none (a key written with escapes).
 */
export function payloadText(line: string): string | undefined {
  let depth = 0;
  let start = -1;
  let found: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line.charCodeAt(i);
    if (c === 34) {
      const j = closingQuote(line, i);
      if (j === -1) return undefined;
      if (depth === 1 && start === -1 && j === i + 8 && line.startsWith('"payload"', i)) {
        let m = j + 1;
        while (m < line.length && line.charCodeAt(m) <= 32) m++;
        if (line.charCodeAt(m) === 58) {
          start = m + 1;
          i = m;
          continue;
        }
      }
      i = j;
    } else if (c === 123 || c === 91) {
      depth++;
    } else if (c === 125 || c === 93 || c === 44) {
      if (c !== 44) depth--;
      if (start !== -1 && (depth === 0 || (c === 44 && depth === 1))) {
        found = line.slice(start, i).trim();
        start = -1;
      }
    }
  }
  return found;
}

/**
 * The text of element `index` of a JSON array line, as it is (format
 * version 2: a record's payload, the stored jsonb's own text). Strings are
 * skipped whole by their quotes. The line must have parsed as an array: the
 * last element (`last`) then ends at its closing bracket, unscanned.
 * Undefined when the array has no such element.
 */
export function elementText(line: string, index: number, last = false): string | undefined {
  let depth = 0;
  let element = 0;
  let start = -1;
  for (let i = 0; i < line.length; i++) {
    const c = line.charCodeAt(i);
    if (c === 34) {
      const j = closingQuote(line, i);
      if (j === -1) return undefined;
      i = j;
    } else if (c === 91 || c === 123) {
      depth++;
      if (depth === 1) {
        if (c !== 91) return undefined;
        if (index === 0) start = i + 1;
      }
    } else if (c === 93 || c === 125) {
      depth--;
      if (depth === 0) return start === -1 ? undefined : line.slice(start, i).trim();
    } else if (c === 44 && depth === 1) {
      if (start !== -1) return line.slice(start, i).trim();
      if (++element === index) start = i + 1;
    }
    if (start !== -1 && last) {
      const end = line.lastIndexOf("]");
      return end < start ? undefined : line.slice(start, end).trim();
    }
  }
  return undefined;
}

/** A section of a version-2 dump being read: its records' type, its columns, where the payload is (-1: none). */
interface OpenSection {
  readonly section: string;
  readonly records: string;
  readonly columns: readonly string[];
  readonly payload: number;
}

/** Checks a section line against the one before it and the columns this reader knows (docs/dump-format.md). */
function openSection(rec: Record<string, unknown>, lineNo: number, before: OpenSection | undefined): OpenSection {
  const name = rec.section;
  const spec = typeof name === "string" ? SECTION_COLUMNS.get(name) : undefined;
  if (typeof name !== "string" || spec === undefined) throw bad(lineNo, `unknown section ${JSON.stringify(name)}`);
  const order = (s: string | undefined) => (s === undefined ? -1 : (SECTIONS as readonly string[]).indexOf(s));
  if (order(name) <= order(before?.section)) throw bad(lineNo, `section ${name} out of order`);
  const columns = rec.columns;
  if (
    rec.records !== spec.records ||
    !Array.isArray(columns) ||
    columns.length !== spec.columns.length ||
    new Set(columns).size !== columns.length ||
    !spec.columns.every((c) => columns.includes(c))
  ) {
    throw bad(lineNo, `section ${name} declares records ${JSON.stringify(rec.records)} of columns ${JSON.stringify(columns)}; this resource-store reads ${spec.records} of ${spec.columns.join(", ")}`);
  }
  return { section: name, records: spec.records, columns: columns as string[], payload: columns.indexOf("payload") };
}

function bad(line: number, what: string): DumpError {
  return new DumpError(`line ${line}: ${what}; the dump is damaged or not one this resource-store wrote, nothing was restored`);
}

/**
 * The columns a version row has in both tables, from payload_type to the
 * end, in COPY's text format: those of versionColumns / currentColumns after
 * their first ones (the current table has no period, its version is second).
 */
function commonFields(v: VersionRecord, text: string | undefined, lineNo: number, withActor: boolean): string {
  if (v.payload === undefined) throw bad(lineNo, `${v.identifier} version ${String(v.version)} has no payload`);
  if (v.derived_from !== null && v.derived_from !== undefined && !Array.isArray(v.derived_from)) throw bad(lineNo, "derived_from is not a list");
  // A version-1 payload key written with escapes is not found by the scan: that line's payload is written again
  // (exact but for numbers past a double's digits).
  const payload = text ?? JSON.stringify(v.payload);
  const actor = withActor ? `\t${copyValue(v.actor)}` : "";
  return `${copyValue(v.payload_type)}\t${copyValue(v.parent_identifier)}\t${copyValue(v.license)}\t${copyValue(v.access_level)}\t${copyValue(
    arrayLiteral(v.derived_from ?? []),
  )}\t${copyValue(payload)}\t${copyValue(v.created_at)}\t${copyValue(v.from)}\t${copyValue(v.is_deleted)}\t${copyValue(v.deleted_by)}${actor}`;
}

function checkHeader(h: unknown): Header {
  const header = h as Partial<Header> | null;
  if (header === null || typeof header !== "object" || header.record !== "header" || header.format !== DUMP_FORMAT) {
    throw new DumpError("not a resource-store dump (its first line is not a dump header)");
  }
  if (typeof header.format_version !== "number" || !Number.isInteger(header.format_version) || header.format_version < 1) {
    throw new DumpError("the dump header has no valid format_version");
  }
  if (header.format_version > DUMP_FORMAT_VERSION) {
    throw new DumpError(
      `the dump is format version ${header.format_version}, written by a newer resource-store; this one reads up to ${DUMP_FORMAT_VERSION}: upgrade it to restore this dump`,
    );
  }
  return header as Header;
}

/** How many rows the store holds that a full restore would have to merge with (it never does). */
async function storeContents(q: Queryable): Promise<{ resources: number; registry: number }> {
  const { rows } = await q.query<{ r: string; v: string; p: string; s: string }>(
    `SELECT (SELECT count(*) FROM resources) AS r, (SELECT count(*) FROM resource_versions) AS v,
            (SELECT count(*) FROM registry_patients) AS p, (SELECT count(*) FROM registry_studies) AS s`,
  );
  const row = rows[0]!;
  return { resources: Number(row.r) + Number(row.v), registry: Number(row.p) + Number(row.s) };
}

/**
 * Loads a dump into `db` (docs/dump-format.md, restore rules): a full dump
 * into an empty store, an incremental one into the store its `since` names.
 * One transaction: on any failure nothing is written.
 */
export async function restoreDump(db: Db, input: Readable, opts: RestoreOptions = {}): Promise<RestoreSummary> {
  const batchSize = opts.batchSize ?? 5000;
  let bytesRead = 0;
  input.on("data", (chunk: Buffer) => {
    bytesRead += chunk.length;
  });
  // Big pieces: fewer chunks to split into lines.
  const gunzip = createGunzip({ chunkSize: 256 * 1024 });
  // The file's first bytes: a data error in a file that does not start as gzip is not a dump at all, one in a
  // file that does is something after the dump's gzip stream (both were once reported as "may be cut short").
  let head = Buffer.alloc(0);
  input.on("data", (chunk: Buffer) => {
    if (head.length < 2) head = Buffer.concat([head, chunk.subarray(0, 2 - head.length)]);
  });
  const isGzip = () => head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b;
  const unreadable = (err: unknown): DumpError => {
    if (err instanceof DumpError) return err;
    const code = (err as NodeJS.ErrnoException | undefined)?.code;
    const why = err instanceof Error ? err.message : String(err);
    if (code === "Z_DATA_ERROR" && !isGzip()) return new DumpError(`the file is not gzip (${why}), so not a resource-store dump; nothing was restored`);
    // After a gzip stream zlib reads what follows as the next one's header.
    if (code === "Z_DATA_ERROR" && /header check|unknown compression method/.test(why)) {
      return new DumpError(`the file has bytes after the dump's end (${why}): it is not one dump as written; nothing was restored`);
    }
    if (code === "Z_DATA_ERROR") return new DumpError(`the dump is damaged (${why}); nothing was restored`);
    if (code === "Z_BUF_ERROR") return new DumpError(`the dump is cut short (${why}); nothing was restored`);
    return new DumpError(`the dump cannot be read (${why}); nothing was restored`);
  };
  // An error of the file reaches the chunk iterator through the decompressor, as the decompressor's own do.
  // (Not by racing each read against a promise that settles only on error: every race would stay attached
  // to it, holding its chunk, and the whole file would stay in memory.)
  input.once("error", (err) => gunzip.destroy(err));
  const chunks = input.pipe(gunzip)[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  // Lines split from the decompressed chunks, each with its bytes (newline included) for the digest.
  let lines: string[] = [];
  let raws: Buffer[] = [];
  let at = 0;
  let partial: Buffer[] = [];
  let ended = false;
  /** The bytes of the line nextLine returned last. */
  let lastRaw: Buffer = Buffer.alloc(0);
  const refill = async (): Promise<boolean> => {
    while (!ended) {
      let r: IteratorResult<Buffer>;
      try {
        r = await chunks.next();
      } catch (err) {
        throw unreadable(err);
      }
      lines = [];
      raws = [];
      at = 0;
      if (r.done === true) {
        ended = true;
        if (partial.length > 0) {
          // A last line without its newline.
          const tail = Buffer.concat(partial);
          partial = [];
          lines.push(tail.toString("utf8"));
          raws.push(Buffer.concat([tail, Buffer.from("\n")]));
          return true;
        }
        return false;
      }
      const buf = r.value;
      let start = 0;
      for (let i = buf.indexOf(NEWLINE); i !== -1; i = buf.indexOf(NEWLINE, start)) {
        const raw = partial.length > 0 ? Buffer.concat([...partial, buf.subarray(start, i + 1)]) : buf.subarray(start, i + 1);
        partial = [];
        lines.push(raw.toString("utf8", 0, raw.length - 1));
        raws.push(raw);
        start = i + 1;
      }
      if (start < buf.length) partial.push(buf.subarray(start));
      if (lines.length > 0) return true;
    }
    return false;
  };
  const nextLine = async (): Promise<string | undefined> => {
    if (at >= lines.length && !(await refill())) return undefined;
    lastRaw = raws[at]!;
    return lines[at++];
  };

  const first = await nextLine();
  if (first === undefined) throw new DumpError("the dump is empty");
  let parsed: unknown;
  try {
    parsed = JSON.parse(first);
  } catch {
    throw new DumpError("not a resource-store dump (its first line is not JSON)");
  }
  const header = checkHeader(parsed);
  const digest = new Digest();
  digest.add(lastRaw);

  // The batch before this one is loading while this one is parsed: the server works while this process reads.
  // On a failure the transaction ends only once that batch has: one statement at a time on its connection.
  let loading: Promise<void> = Promise.resolve();
  const settled = async (err: unknown): Promise<never> => {
    await loading.catch(() => {});
    throw err;
  };
  const summary = await db.transaction((tx) => load(tx).catch(settled));
  async function load(tx: Queryable): Promise<RestoreSummary> {
    const shape = await shapeOf(tx);
    // The tree counts (migration 20) are rebuilt once at the end, not kept row by row while loading.
    const treeCounts = shape.migrations.includes(20);
    if (treeCounts) await pauseTreeCounts(tx);
    let dropped: SecondaryIndex[] = [];
    // Nothing else writes while we load: the clock row is ours until commit.
    const { rows: clockRows } = await tx.query<{ last: string | null }>(
      `SELECT CASE WHEN last = '-infinity' THEN NULL ELSE ${ts("last")} END AS last FROM clock FOR UPDATE`,
    );
    const clock = clockRows[0]?.last ?? null;
    if (header.since === null) {
      const held = await storeContents(tx);
      if (held.resources > 0 || held.registry > 0) {
        throw new DumpError(
          `the store is not empty (${held.resources} versions of resources, ${held.registry} registry rows): a dump is restored only into an empty store`,
        );
      }
      dropped = await dropSecondaryIndexes(tx);
    } else {
      const { rows } = await tx.query<{ same: boolean }>("SELECT $1::timestamptz IS NOT DISTINCT FROM $2::timestamptz AS same", [clock, header.since]);
      if (rows[0]?.same !== true) {
        throw new DumpError(
          `this incremental dump follows ${header.since}, but the store's last write is ${clock ?? "none"}: restore the dumps it follows first, in order`,
        );
      }
    }

    const counts: Record<string, number> = { version: 0, version_current: 0, registry_key: 0, registry_key_chain: 0, registry_patient: 0, registry_study: 0 };
    // Rows in COPY's text format, a table each; the closed versions' keys for an incremental dump.
    let currentRows = "";
    let supersededRows = "";
    let batched = 0;
    const closedIds: string[] = [];
    const closedVersions: string[] = [];
    const actor = shape.actor ? ["actor"] : [];
    const versionColumns = ["identifier", "version", "tx_from", "tx_to", "payload_type", "parent_identifier", "license", "access_level",
      "derived_from", "payload", "created_at", "updated_at", "is_deleted", "deleted_by", ...actor];
    const currentColumns = ["identifier", "version", "payload_type", "parent_identifier", "license", "access_level",
      "derived_from", "payload", "created_at", "updated_at", "is_deleted", "deleted_by", ...actor];
    const copyIn = tx.copyIn?.bind(tx);
    if (copyIn === undefined) throw new Error("restore needs a transaction that can COPY");
    const flushVersions = async (): Promise<void> => {
      await loading;
      if (batched === 0) return;
      const versions = supersededRows;
      const currents = currentRows;
      const ids = closedIds.splice(0);
      const vs = closedVersions.splice(0);
      supersededRows = "";
      currentRows = "";
      batched = 0;
      loading = (async () => {
        // An incremental dump closes versions that were current in the store: they leave `resources` first.
        if (ids.length > 0) {
          await tx.query(
            `DELETE FROM resources r USING unnest($1::text[], $2::bigint[]) AS x(identifier, version)
              WHERE r.identifier = x.identifier AND r.version = x.version`,
            [ids, vs],
          );
        }
        if (versions !== "") await copyIn("resource_versions", versionColumns, versions);
        if (currents !== "") await copyIn("resources", currentColumns, currents);
      })();
      loading.catch(() => {});
      opts.onProgress?.(counts.version!, bytesRead);
    };

    // Per identifier: versions consecutive, contiguous periods, one current version, the last.
    let prev: VersionRecord | undefined;
    const endIdentifier = (lineNo: number): void => {
      if (prev !== undefined && header.since === null && prev.to !== null) throw bad(lineNo, `${prev.identifier} has no current version`);
    };
    const registryRows: Record<string, Record<string, unknown>[]> = { registry_key: [], registry_key_chain: [], registry_patient: [], registry_study: [] };
    let lineNo = 1;
    // A section is written in full before the next begins; what references it (studies their patients, rows their chains) comes later.
    let section: unknown = "version";
    const flushAll = async (): Promise<void> => {
      await flushVersions();
      await loading;
      for (const name of ["registry_key", "registry_key_chain", "registry_patient", "registry_study"]) await flushRegistry(tx, shape, registryRows, name);
    };
    type Trailer = { counts?: Record<string, number>; sha256?: string };
    let trailer: Trailer | undefined;
    // Format version 2: the section whose records follow.
    let open: OpenSection | undefined;
    for (;;) {
      const line = await nextLine();
      if (line === undefined) break;
      lineNo++;
      if (trailer !== undefined) throw bad(lineNo, "a line after the trailer");
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        throw bad(lineNo, "not JSON");
      }
      let rec: { record?: unknown } & Record<string, unknown>;
      // The stored text of the payload, as the line holds it.
      let payload: string | undefined;
      if (Array.isArray(parsed)) {
        // Format version 2: a record of the open section, its values in the order of its columns.
        if (open === undefined) throw bad(lineNo, header.format_version < 2 ? "a list where a record was expected" : "a record before its section line");
        if (parsed.length !== open.columns.length) throw bad(lineNo, `a ${open.records} record of ${parsed.length} values, not ${open.columns.length}`);
        rec = { record: open.records };
        for (let i = 0; i < parsed.length; i++) rec[open.columns[i]!] = parsed[i];
        if (open.payload !== -1) payload = elementText(line, open.payload, open.payload === open.columns.length - 1);
      } else {
        rec = parsed as typeof rec;
        if (rec === null || typeof rec !== "object") throw bad(lineNo, "neither a record nor a list");
        if (rec.record === "trailer") {
          trailer = rec as Trailer;
          continue;
        }
        if (header.format_version >= 2) {
          if (rec.record !== "section") throw bad(lineNo, `unknown record ${JSON.stringify(rec.record)}`);
          digest.add(lastRaw);
          open = openSection(rec, lineNo, open);
          continue;
        }
        if (rec.record === "version") payload = payloadText(line);
      }
      digest.add(lastRaw);
      if (rec.record !== section) {
        await flushAll();
        section = rec.record;
      }
      if (rec.record === "version") {
        const v = rec as unknown as VersionRecord;
        if (typeof v.identifier !== "string" || typeof v.from !== "string" || (v.to !== null && typeof v.to !== "string")) throw bad(lineNo, "a version without identifier or period");
        if (shape.actor === false && v.actor !== null && v.actor !== undefined) {
          throw new DumpError("the dump records actors and this store cannot hold them: upgrade resource-store before restoring");
        }
        const n = Number(v.version);
        const same = prev?.identifier === v.identifier;
        if (!same) endIdentifier(lineNo);
        if (same) {
          if (n !== Number(prev!.version) + 1) throw bad(lineNo, `${v.identifier} version ${n} does not follow ${String(prev!.version)}`);
          if (prev!.to !== v.from) throw bad(lineNo, `${v.identifier} version ${n} does not begin where version ${String(prev!.version)} ended`);
        } else if (prev !== undefined && Buffer.compare(Buffer.from(prev.identifier), Buffer.from(v.identifier)) >= 0) {
          throw bad(lineNo, "identifiers out of order");
        } else if (header.since === null && n !== 1) {
          throw bad(lineNo, `${v.identifier} begins at version ${n}`);
        }
        const before = same ? { isDeleted: prev!.is_deleted, createdAt: prev!.created_at } : undefined;
        if (header.since === null && kindOf(n, v.is_deleted, v.created_at, before) !== v.kind) throw bad(lineNo, `${v.identifier} version ${n} is not ${v.kind}`);
        const common = commonFields(v, payload, lineNo, shape.actor);
        if (v.to === null) {
          currentRows += `${copyValue(v.identifier)}\t${String(v.version)}\t${common}\n`;
          counts.version_current!++;
        } else {
          supersededRows += `${copyValue(v.identifier)}\t${String(v.version)}\t${copyValue(v.from)}\t${copyValue(v.to)}\t${common}\n`;
          if (header.since !== null) {
            closedIds.push(v.identifier);
            closedVersions.push(String(v.version));
          }
        }
        batched++;
        counts.version!++;
        prev = v;
        if (batched >= batchSize) await flushVersions();
      } else if (typeof rec.record === "string" && rec.record in registryRows) {
        registryRows[rec.record]!.push(rec);
        counts[rec.record]!++;
        if (registryRows[rec.record]!.length >= batchSize) await flushRegistry(tx, shape, registryRows, rec.record);
      } else {
        throw bad(lineNo, `unknown record ${JSON.stringify(rec.record)}`);
      }
    }
    endIdentifier(lineNo);
    if (trailer === undefined) throw new DumpError("the dump has no trailer: it was cut short; nothing was restored");
    for (const [name, n] of Object.entries(counts)) {
      if (trailer.counts?.[name] !== n) throw new DumpError(`the dump's trailer counts ${trailer.counts?.[name] ?? 0} ${name} records, the file holds ${n}; nothing was restored`);
    }
    if (trailer.sha256 !== digest.hex()) throw new DumpError("the dump's checksum does not match its content; nothing was restored");
    await flushAll();
    await loading;
    // Access (docs/contract/18-access.md): versions loaded wholesale get their datasource attribution here
    // (before the indexes are built again: its update of every current row then maintains only the keys).
    await rebuildAttribution(tx);
    // Built once over the loaded rows, as a bulk load does, instead of kept row by row.
    for (const ix of dropped) await tx.query(ix.def);
    if (header.until !== null) await tx.query("UPDATE clock SET last = $1::timestamptz", [header.until]);
    // The statistics' log of counts (migration 0023) starts again here: the versions loaded carry stamps of their own.
    await tx.query("SELECT datasource_counts_restart()");
    // Derived data: the tree counts, once over what was loaded (the triggers were paused for the load).
    if (treeCounts) await rebuildTreeCounts(tx);
    return { versions: counts.version!, until: header.until ?? "", since: header.since };
  }
  return summary;
}

interface SecondaryIndex {
  readonly name: string;
  readonly def: string;
}

/**
 * Drops the indexes of the two version tables that no constraint needs (a
 * full restore into an empty store, in its transaction, which puts them back
 * on any failure), and returns their definitions to build them again.
 */
async function dropSecondaryIndexes(tx: Queryable): Promise<SecondaryIndex[]> {
  const { rows } = await tx.query<SecondaryIndex>(
    `SELECT i.indexname AS name, i.indexdef AS def FROM pg_indexes i
      WHERE i.schemaname = current_schema() AND i.tablename IN ('resources', 'resource_versions')
        AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conname = i.indexname)
      ORDER BY i.indexname`,
  );
  for (const ix of rows) await tx.query(`DROP INDEX ${quoteIdent(ix.name)}`);
  return rows;
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

async function flushRegistry(tx: Queryable, shape: Shape, rows: Record<string, Record<string, unknown>[]>, name: string): Promise<void> {
  const batch = rows[name]!;
  if (batch.length === 0) return;
  const json = JSON.stringify(batch);
  const k = shape.keyColumn;
  switch (name) {
    case "registry_key":
      if (!shape.registryKeys) throw new DumpError("the dump holds registry key fingerprints and this store cannot keep them: upgrade resource-store before restoring");
      await tx.query(
        `INSERT INTO registry_keys (key_id, fingerprint, recorded_at)
         SELECT x.key_id, decode(x.fingerprint, 'hex'), x.recorded_at FROM jsonb_to_recordset($1::text::jsonb) AS x(key_id text, fingerprint text, recorded_at timestamptz)
         ON CONFLICT (key_id) DO NOTHING`,
        [json],
      );
      {
        // A store that knows a key id with another key would hash and resolve differently from the source.
        const { rows: clash } = await tx.query<{ key_id: string }>(
          `SELECT k.key_id FROM registry_keys k JOIN jsonb_to_recordset($1::text::jsonb) AS x(key_id text, fingerprint text)
              ON x.key_id = k.key_id WHERE k.fingerprint <> decode(x.fingerprint, 'hex')`,
          [json],
        );
        if (clash.length > 0) throw new DumpError(`this store knows registry key ${clash[0]!.key_id} as another key than the dump's source; nothing was restored`);
      }
      break;
    case "registry_key_chain":
      if (!shape.registryChains) throw new DumpError("the dump holds registry key chains and this store cannot keep them: upgrade resource-store before restoring");
      await tx.query(
        `INSERT INTO registry_key_chains (chain, key_ids)
         SELECT x.chain, x.key_ids FROM jsonb_to_recordset($1::text::jsonb) AS x(chain text, key_ids text[])
         ON CONFLICT (chain) DO UPDATE SET key_ids = coalesce(registry_key_chains.key_ids, excluded.key_ids)`,
        [json],
      );
      break;
    default: {
      // registry_patient, registry_study: one statement, each table's scope column.
      const t = REGISTRY_ROWS.find((r) => r.record === name);
      if (t === undefined) throw new Error(`no registry table for record ${name}`);
      await tx.query(
        `INSERT INTO ${t.table} (identifier, ${t.scope}, uid_hash, ${k}, registered_at)
         SELECT x.identifier, x.${t.scope}, decode(x.uid_hash, 'hex'), x.key_chain, x.registered_at
           FROM jsonb_to_recordset($1::text::jsonb) AS x(identifier text, ${t.scope} text, uid_hash text, key_chain text, registered_at timestamptz)
         ON CONFLICT (identifier) DO UPDATE SET uid_hash = excluded.uid_hash, ${k} = excluded.${k}`,
        [json],
      );
    }
  }
  batch.length = 0;
}
