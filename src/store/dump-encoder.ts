// The records of the versions and counts_log sections from PostgreSQL's
// binary COPY (docs/dump-format.md): each row of versionCopySql (or of
// countsLogSql) written as its record, byte for byte the line the statement
// of the embedded store builds. The rows are read by the one
// binary COPY reader (copy-binary.ts); what each value becomes is here.
import { COPY_PARTIAL, COPY_TRAILER, copyHeaderEnd, readCopyRow } from "../copy-binary.js";
import { BOOL, RAW, STAMP, STRING, type Kind, type RecordColumn } from "./dump-format.js";

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
 * versions section (or of countsLogSql, of the counts_log section): fed
 * chunks as they come (a row may span two), it returns the bytes of the
 * complete rows of each and counts them. Each column is written as its
 * columns (versionColumns, countsLogColumns) say. Strings are escaped by
 * JSON.stringify, which escapes exactly what PostgreSQL's to_json does (the
 * quote, the backslash, control characters, in the same forms), so the
 * records are those the statement of the embedded store builds, byte for
 * byte. The text is handled as latin1, one character a byte: UTF-8 text
 * passes through unchanged (every byte JSON escapes is ASCII, and a
 * multi-byte character's bytes are all above 0x7f), and neither decoding
 * nor encoding validates or converts anything.
 *
 * The kind (a version's only) is kindOf's, from the version before: in a full dump the row
 * before, when it is of the same identifier (the rows come in key order,
 * every version of each); in an incremental one the last two fields.
 */
export class RecordEncoder {
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
  /** Records written. */
  records = 0;
  current = 0;
  ended = false;

  constructor(columns: readonly RecordColumn[], incremental: boolean) {
    let f = 0;
    for (const c of columns) {
      this.field.push(c.copy === undefined ? -1 : f++);
      this.encoding.push(c.encoding);
    }
    const at = (name: string): number => this.field[columns.findIndex((c) => c.name === name)]!;
    this.ix = {
      identifier: at("identifier"),
      version: at("version"),
      created: at("created_at"),
      deleted: at("is_deleted"),
    };
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
        if (this.prevId.length < idEnd - idStart)
          this.prevId = Buffer.alloc(Math.max(2 * this.prevId.length, idEnd - idStart));
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
    this.records++;
  }
}
