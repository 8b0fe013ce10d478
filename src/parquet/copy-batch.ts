// Rows of PostgreSQL's binary COPY format -> one Arrow record batch as an
// IPC stream, built in an encoder worker: the main thread only cuts the
// stream into row groups (copy-rows.ts). Every value becomes what the row
// path (columns.ts getters, arrow-batch.ts) makes of the same row: the
// payload fields come as jsonb and are read with JSON's rules, strings
// without escapes are copied as bytes, and timestamps and int8 arrive as
// binary integers.
import type * as Arrow from "apache-arrow";
import { COPY_PARTIAL, COPY_TRAILER, readCopyRow } from "../copy-binary.js";

export type ColumnKind = "utf8" | "int32" | "int64" | "float64" | "bool" | "timestamp" | "utf8_list";

/** How a column's value travels in the COPY row, and what it becomes. */
export type Wire =
  /** text -> utf8 */
  | "text"
  /** text[] -> list<utf8> */
  | "text_array"
  /** int8 -> int64 */
  | "int8"
  /** timestamptz -> timestamp[us, UTC] */
  | "timestamptz"
  /** jsonb: a JSON string -> utf8, anything else null */
  | "json_string"
  /** jsonb: any value but null -> its JSON.stringify text */
  | "json_text"
  /** jsonb: a number -> int32 (ToInt32, as an Int32Array stores it) */
  | "json_int"
  /** jsonb: a number or a decimal string -> int64 */
  | "json_bigint"
  /** jsonb: a number or a string -> float64 (Number()) */
  | "json_float"
  /** jsonb: true/false -> bool */
  | "json_bool"
  /** jsonb: an array -> list<utf8> */
  | "json_list";

export interface WireColumn {
  readonly name: string;
  readonly kind: ColumnKind;
  readonly wire: Wire;
}

/**
 * One record batch of `rows` COPY tuples (no header, no trailer) in
 * `data`, as an Arrow IPC stream; the encoder workers run it
 * (encoder-worker.ts), with `arrow` the apache-arrow module.
 */
export function copyTuplesToIpc(
  arrow: typeof Arrow,
  data: Uint8Array,
  rows: number,
  columns: readonly WireColumn[],
): Uint8Array {
  const n = columns.length;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  // Where each value's bytes start, and how many (-1 = null), row-major.
  const at = new Int32Array(rows * n);
  const len = new Int32Array(rows * n);
  let p = 0;
  for (let r = 0; r < rows; r++) {
    const q = readCopyRow(data, p, data.length, n, at, len, r * n);
    if (q === COPY_PARTIAL || q === COPY_TRAILER) throw new Error(`COPY data ends before row ${r} of ${rows}`);
    p = q;
  }
  if (p !== data.length) throw new Error(`COPY data holds ${data.length - p} bytes after its ${rows} rows`);

  const decoder = new TextDecoder("utf-8", { fatal: true });
  const encoder = new TextEncoder();
  const TWO_32 = 4294967296;
  // Microseconds from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
  const PG_EPOCH_US = 946684800000000;
  const PG_EPOCH_BIG = BigInt(PG_EPOCH_US);
  const QUOTE = 0x22;
  const BACKSLASH = 0x5c;
  // int64 values are written as two little-endian 32-bit words; on a big-endian host, as BigInts.
  const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

  /** The bytes data[from, from + l) at out[o]: a loop for the short values most are, set() for long ones. */
  function copyBytes(out: Uint8Array, o: number, from: number, l: number): void {
    if (l > 24) out.set(data.subarray(from, from + l), o);
    else for (let j = 0; j < l; j++) out[o + j] = data[from + j] as number;
  }

  /** `s` as UTF-8 at out[o], growing `box.out` when needed; the new end. */
  function putString(box: { out: Uint8Array }, o: number, s: string): number {
    if (s.length === 0) return o;
    if (o + s.length * 3 > box.out.length) {
      const next = new Uint8Array(Math.max(box.out.length * 2, o + s.length * 3));
      next.set(box.out.subarray(0, o));
      box.out = next;
    }
    return o + encoder.encodeInto(s, box.out.subarray(o)).written;
  }

  /** Where a jsonb value's JSON text starts (after its version byte). */
  function jsonStart(k: number): number {
    const s = at[k] as number;
    if (data[s] !== 1) throw new Error(`jsonb version ${String(data[s])} in COPY data`);
    return s + 1;
  }
  function jsonText(k: number): string {
    return decoder.decode(data.subarray(jsonStart(k), (at[k] as number) + (len[k] as number)));
  }
  function isNumberStart(b: number): boolean {
    return b === 0x2d || (b >= 0x30 && b <= 0x39);
  }
  /** A plain integer of at most 15 digits in data[from, to) as a Number; NaN otherwise. */
  function shortInt(from: number, to: number): number {
    const neg = data[from] === 0x2d;
    const s = neg ? from + 1 : from;
    if (to === s || to - s > 15) return NaN;
    let v = 0;
    for (let i = s; i < to; i++) {
      const d = (data[i] as number) - 0x30;
      if (d < 0 || d > 9) return NaN;
      v = v * 10 + d;
    }
    return neg ? -v : v;
  }
  function putInt64(out: BigInt64Array, words: Uint32Array, i: number, num: number): void {
    if (!littleEndian) {
      out[i] = BigInt(num);
      return;
    }
    const hi = Math.floor(num / TWO_32);
    words[2 * i] = num - hi * TWO_32;
    words[2 * i + 1] = hi;
  }
  function validity(bits: Uint8Array, nulls: number) {
    return nulls > 0 ? { nullCount: nulls, nullBitmap: bits } : { nullCount: 0 };
  }

  function textColumn(c: number): Arrow.Data {
    const bits = new Uint8Array((rows + 7) >> 3);
    const offsets = new Int32Array(rows + 1);
    let total = 0;
    for (let i = 0; i < rows; i++) {
      const l = len[i * n + c] as number;
      if (l > 0) total += l;
    }
    const out = new Uint8Array(total);
    let o = 0;
    let nulls = 0;
    for (let i = 0; i < rows; i++) {
      const k = i * n + c;
      const l = len[k] as number;
      if (l < 0) nulls += 1;
      else {
        bits[i >> 3] = (bits[i >> 3] as number) | (1 << (i & 7));
        copyBytes(out, o, at[k] as number, l);
        o += l;
      }
      offsets[i + 1] = o;
    }
    return arrow.makeData({
      type: new arrow.Utf8(),
      length: rows,
      ...validity(bits, nulls),
      valueOffsets: offsets,
      data: out,
    });
  }

  function jsonStringColumn(c: number): Arrow.Data {
    const bits = new Uint8Array((rows + 7) >> 3);
    const offsets = new Int32Array(rows + 1);
    // A JSON string's text is never shorter than its UTF-8 (an escape stands for fewer bytes than it takes).
    let total = 0;
    for (let i = 0; i < rows; i++) {
      const l = len[i * n + c] as number;
      if (l > 0) total += l;
    }
    const box = { out: new Uint8Array(total) };
    let o = 0;
    let nulls = 0;
    for (let i = 0; i < rows; i++) {
      const k = i * n + c;
      const l = len[k] as number;
      const s = l < 0 ? 0 : jsonStart(k);
      if (l < 0 || data[s] !== QUOTE) nulls += 1;
      else {
        bits[i >> 3] = (bits[i >> 3] as number) | (1 << (i & 7));
        const e = (at[k] as number) + l - 1;
        // Copied while looking for an escape; without one, the bytes between the quotes are the string's UTF-8.
        const out = box.out;
        let w = o;
        let j = s + 1;
        for (; j < e; j++) {
          const byte = data[j] as number;
          if (byte === BACKSLASH) break;
          out[w++] = byte;
        }
        if (j === e) o = w;
        else o = putString(box, o, JSON.parse(jsonText(k)) as string);
      }
      offsets[i + 1] = o;
    }
    return arrow.makeData({
      type: new arrow.Utf8(),
      length: rows,
      ...validity(bits, nulls),
      valueOffsets: offsets,
      data: box.out.subarray(0, o),
    });
  }

  function jsonTextColumn(c: number): Arrow.Data {
    const bits = new Uint8Array((rows + 7) >> 3);
    const offsets = new Int32Array(rows + 1);
    const box = { out: new Uint8Array(1024) };
    let o = 0;
    let nulls = 0;
    for (let i = 0; i < rows; i++) {
      const k = i * n + c;
      const v = (len[k] as number) < 0 ? null : (JSON.parse(jsonText(k)) as unknown);
      if (v === null) nulls += 1;
      else {
        bits[i >> 3] = (bits[i >> 3] as number) | (1 << (i & 7));
        o = putString(box, o, JSON.stringify(v));
      }
      offsets[i + 1] = o;
    }
    return arrow.makeData({
      type: new arrow.Utf8(),
      length: rows,
      ...validity(bits, nulls),
      valueOffsets: offsets,
      data: box.out.subarray(0, o),
    });
  }

  function listColumn(c: number, fromJson: boolean): Arrow.Data {
    const bits = new Uint8Array((rows + 7) >> 3);
    const offsets = new Int32Array(rows + 1);
    const childOffsets: number[] = [0];
    const box = { out: new Uint8Array(1024) };
    let o = 0;
    let items = 0;
    let nulls = 0;
    for (let i = 0; i < rows; i++) {
      const k = i * n + c;
      if ((len[k] as number) < 0) nulls += 1;
      else if (!fromJson) {
        bits[i >> 3] = (bits[i >> 3] as number) | (1 << (i & 7));
        let q = at[k] as number;
        const dims = view.getInt32(q);
        q += 12; // ndim, has-nulls flag, element type
        let count = dims === 0 ? 0 : 1;
        for (let d = 0; d < dims; d++) {
          count *= view.getInt32(q);
          q += 8; // size, lower bound
        }
        for (let j = 0; j < count; j++) {
          const l = view.getInt32(q);
          q += 4;
          // A null element takes no bytes (as the row path's empty string does).
          if (l > 0) {
            if (o + l > box.out.length) {
              const next = new Uint8Array(Math.max(box.out.length * 2, o + l));
              next.set(box.out.subarray(0, o));
              box.out = next;
            }
            copyBytes(box.out, o, q, l);
            o += l;
            q += l;
          }
          childOffsets.push(o);
          items += 1;
        }
      } else {
        const v = JSON.parse(jsonText(k)) as unknown;
        if (!Array.isArray(v)) nulls += 1;
        else {
          bits[i >> 3] = (bits[i >> 3] as number) | (1 << (i & 7));
          for (const e of v as unknown[]) {
            if (e) o = putString(box, o, typeof e === "string" ? e : JSON.stringify(e));
            childOffsets.push(o);
            items += 1;
          }
        }
      }
      offsets[i + 1] = items;
    }
    const child = arrow.makeData({
      type: new arrow.Utf8(),
      length: items,
      nullCount: 0,
      data: box.out.subarray(0, o),
      valueOffsets: Int32Array.from(childOffsets),
    });
    const type = new arrow.List(new arrow.Field("element", new arrow.Utf8(), true));
    return arrow.makeData({ type, length: rows, ...validity(bits, nulls), valueOffsets: offsets, child });
  }

  function int64Column(c: number, timestamp: boolean): Arrow.Data {
    const bits = new Uint8Array((rows + 7) >> 3);
    const out = new BigInt64Array(rows);
    const words = new Uint32Array(out.buffer);
    const epochHi = timestamp ? Math.floor(PG_EPOCH_US / TWO_32) : 0;
    const epochLo = timestamp ? PG_EPOCH_US - epochHi * TWO_32 : 0;
    let nulls = 0;
    for (let i = 0; i < rows; i++) {
      const k = i * n + c;
      if ((len[k] as number) < 0) {
        nulls += 1;
        continue;
      }
      bits[i >> 3] = (bits[i >> 3] as number) | (1 << (i & 7));
      const q = at[k] as number;
      if (!littleEndian) {
        out[i] = view.getBigInt64(q) + (timestamp ? PG_EPOCH_BIG : 0n);
        continue;
      }
      // Big-endian in, two little-endian words out, the epoch added with a carry (exact for every int64).
      const lo = view.getUint32(q + 4) + epochLo;
      const carry = lo >= TWO_32 ? 1 : 0;
      words[2 * i] = lo - carry * TWO_32;
      words[2 * i + 1] = view.getInt32(q) + epochHi + carry;
    }
    if (!timestamp)
      return arrow.makeData({ type: new arrow.Int64(), length: rows, ...validity(bits, nulls), data: out });
    return arrow.makeData({
      type: new arrow.Timestamp(arrow.TimeUnit.MICROSECOND, "UTC"),
      length: rows,
      ...validity(bits, nulls),
      data: out,
    });
  }

  function jsonBigintColumn(c: number): Arrow.Data {
    const bits = new Uint8Array((rows + 7) >> 3);
    const out = new BigInt64Array(rows);
    const words = new Uint32Array(out.buffer);
    let nulls = 0;
    for (let i = 0; i < rows; i++) {
      const k = i * n + c;
      const l = len[k] as number;
      const s = l < 0 ? 0 : jsonStart(k);
      const e = (at[k] as number) + l;
      const b = l < 0 ? 0 : (data[s] as number);
      if (isNumberStart(b)) {
        // A JSON number: the double JSON.parse makes of it, as the row path's BigInt(number).
        let num = shortInt(s, e);
        if (Number.isNaN(num)) num = Number(jsonText(k));
        if (Number.isSafeInteger(num)) putInt64(out, words, i, num);
        else out[i] = BigInt(num);
      } else if (b === QUOTE) {
        // A string: up to 15 plain digits as a Number, anything else through BigInt(), which throws on what is not an integer.
        const num = shortInt(s + 1, e - 1);
        if (!Number.isNaN(num)) putInt64(out, words, i, num);
        else out[i] = BigInt(JSON.parse(jsonText(k)) as string);
      } else {
        nulls += 1;
        continue;
      }
      bits[i >> 3] = (bits[i >> 3] as number) | (1 << (i & 7));
    }
    return arrow.makeData({ type: new arrow.Int64(), length: rows, ...validity(bits, nulls), data: out });
  }

  function jsonNumberColumn(c: number, int: boolean): Arrow.Data {
    const bits = new Uint8Array((rows + 7) >> 3);
    const out = int ? new Int32Array(rows) : new Float64Array(rows);
    let nulls = 0;
    for (let i = 0; i < rows; i++) {
      const k = i * n + c;
      const l = len[k] as number;
      const s = l < 0 ? 0 : jsonStart(k);
      const b = l < 0 ? 0 : (data[s] as number);
      let v: number;
      if (isNumberStart(b)) {
        v = shortInt(s, (at[k] as number) + l);
        if (Number.isNaN(v)) v = Number(jsonText(k));
      } else if (!int && b === QUOTE) {
        v = Number(JSON.parse(jsonText(k)) as string);
      } else {
        nulls += 1;
        continue;
      }
      bits[i >> 3] = (bits[i >> 3] as number) | (1 << (i & 7));
      // An Int32Array stores ToInt32 of the number, as the row path's Int32Array.from does.
      out[i] = v;
    }
    if (out instanceof Int32Array)
      return arrow.makeData({ type: new arrow.Int32(), length: rows, ...validity(bits, nulls), data: out });
    return arrow.makeData({ type: new arrow.Float64(), length: rows, ...validity(bits, nulls), data: out });
  }

  function jsonBoolColumn(c: number): Arrow.Data {
    const bits = new Uint8Array((rows + 7) >> 3);
    const values = new Uint8Array((rows + 7) >> 3);
    let nulls = 0;
    for (let i = 0; i < rows; i++) {
      const k = i * n + c;
      const b = (len[k] as number) < 0 ? 0 : data[jsonStart(k)];
      if (b === 0x74 /* t */) {
        bits[i >> 3] = (bits[i >> 3] as number) | (1 << (i & 7));
        values[i >> 3] = (values[i >> 3] as number) | (1 << (i & 7));
      } else if (b === 0x66 /* f */) bits[i >> 3] = (bits[i >> 3] as number) | (1 << (i & 7));
      else nulls += 1;
    }
    return arrow.makeData({ type: new arrow.Bool(), length: rows, ...validity(bits, nulls), data: values });
  }

  function column(c: number, col: WireColumn): Arrow.Data {
    switch (col.wire) {
      case "text":
        return textColumn(c);
      case "json_string":
        return jsonStringColumn(c);
      case "json_text":
        return jsonTextColumn(c);
      case "text_array":
        return listColumn(c, false);
      case "json_list":
        return listColumn(c, true);
      case "int8":
        return int64Column(c, false);
      case "timestamptz":
        return int64Column(c, true);
      case "json_bigint":
        return jsonBigintColumn(c);
      case "json_int":
        return jsonNumberColumn(c, true);
      case "json_float":
        return jsonNumberColumn(c, false);
      case "json_bool":
        return jsonBoolColumn(c);
    }
  }

  const fields = columns.map((col) => new arrow.Field(col.name, typeOf(col), true));
  function typeOf(col: WireColumn): Arrow.DataType {
    switch (col.kind) {
      case "utf8":
        return new arrow.Utf8();
      case "int32":
        return new arrow.Int32();
      case "int64":
        return new arrow.Int64();
      case "float64":
        return new arrow.Float64();
      case "bool":
        return new arrow.Bool();
      case "timestamp":
        return new arrow.Timestamp(arrow.TimeUnit.MICROSECOND, "UTC");
      case "utf8_list":
        return new arrow.List(new arrow.Field("element", new arrow.Utf8(), true));
    }
  }
  const schema = new arrow.Schema(fields);
  const children = columns.map((col, c) => column(c, col));
  const struct = arrow.makeData({ type: new arrow.Struct(schema.fields), length: rows, nullCount: 0, children });
  return arrow.tableToIPC(new arrow.Table([new arrow.RecordBatch(schema, struct)]), "stream");
}
