// A generic Thrift compact-protocol reader and writer, enough to rewrite a
// parquet footer: every field keeps its id and wire type, so a struct read
// and written again is byte for byte what it was, fields this code does not
// know included. hyparquet's reader drops the wire types (i16 and i32 both
// become numbers, an empty list loses its element type, booleans in lists
// become true/false), and hyparquet-writer's serializer guesses them back
// from the JavaScript values, so neither round-trips a footer exactly.

export const TType = {
  BOOL_TRUE: 1,
  BOOL_FALSE: 2,
  BYTE: 3,
  I16: 4,
  I32: 5,
  I64: 6,
  DOUBLE: 7,
  BINARY: 8,
  LIST: 9,
  SET: 10,
  MAP: 11,
  STRUCT: 12,
} as const;

/**
 * A value as read. Booleans inside lists, sets and maps stay the raw byte
 * they were sent as (implementations differ on 0 or 2 for false).
 */
export type ThriftValue = boolean | number | bigint | Uint8Array | ThriftList | ThriftMap | ThriftStruct;

export interface ThriftList {
  readonly kind: "list" | "set";
  readonly elemType: number;
  readonly items: ThriftValue[];
}

interface ThriftMap {
  readonly kind: "map";
  readonly keyType: number;
  readonly valueType: number;
  readonly entries: Array<readonly [ThriftValue, ThriftValue]>;
}

export interface ThriftField {
  readonly id: number;
  /** Wire type; for a boolean field BOOL_TRUE (the value says which). */
  readonly type: number;
  value: ThriftValue;
}

export interface ThriftStruct {
  readonly kind: "struct";
  readonly fields: ThriftField[];
}

/** Reading past the end or meeting an unknown type: the bytes are not a footer we can rewrite. */
class ThriftError extends Error {}

class Reader {
  at: number;
  constructor(
    readonly bytes: Uint8Array,
    at: number,
  ) {
    this.at = at;
  }
  byte(): number {
    if (this.at >= this.bytes.length) throw new ThriftError("thrift: unexpected end of input");
    return this.bytes[this.at++] as number;
  }
  varint(): bigint {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      const b = this.byte();
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
      if (shift > 63n) throw new ThriftError("thrift: varint too long");
    }
  }
  /** Unsigned varint that must fit a safe number (lengths, sizes). */
  size(): number {
    const v = this.varint();
    if (v > BigInt(this.bytes.length)) throw new ThriftError("thrift: length beyond the input");
    return Number(v);
  }
  zigzag(): bigint {
    const v = this.varint();
    return (v >> 1n) ^ -(v & 1n);
  }
}

function readValue(r: Reader, type: number, inCollection: boolean): ThriftValue {
  switch (type) {
    case TType.BOOL_TRUE:
    case TType.BOOL_FALSE:
      return inCollection ? r.byte() : type === TType.BOOL_TRUE;
    case TType.BYTE: {
      const b = r.byte();
      return b > 127 ? b - 256 : b;
    }
    case TType.I16:
    case TType.I32:
      return Number(r.zigzag());
    case TType.I64:
      return r.zigzag();
    case TType.DOUBLE: {
      if (r.at + 8 > r.bytes.length) throw new ThriftError("thrift: unexpected end of input");
      const v = new DataView(r.bytes.buffer, r.bytes.byteOffset + r.at, 8).getFloat64(0, true);
      r.at += 8;
      return v;
    }
    case TType.BINARY: {
      const n = r.size();
      if (r.at + n > r.bytes.length) throw new ThriftError("thrift: binary beyond the input");
      const v = r.bytes.subarray(r.at, r.at + n);
      r.at += n;
      return v;
    }
    case TType.LIST:
    case TType.SET: {
      const head = r.byte();
      const elemType = head & 0x0f;
      const n = head >> 4 === 15 ? r.size() : head >> 4;
      const items: ThriftValue[] = [];
      for (let i = 0; i < n; i++) items.push(readValue(r, elemType, true));
      return { kind: type === TType.LIST ? "list" : "set", elemType, items };
    }
    case TType.MAP: {
      const n = r.size();
      const types = n > 0 ? r.byte() : 0;
      const keyType = types >> 4;
      const valueType = types & 0x0f;
      const entries: Array<readonly [ThriftValue, ThriftValue]> = [];
      for (let i = 0; i < n; i++) entries.push([readValue(r, keyType, true), readValue(r, valueType, true)]);
      return { kind: "map", keyType, valueType, entries };
    }
    case TType.STRUCT:
      return readStructAt(r);
    default:
      throw new ThriftError(`thrift: unknown type ${type}`);
  }
}

function readStructAt(r: Reader): ThriftStruct {
  const fields: ThriftField[] = [];
  let id = 0;
  for (;;) {
    const head = r.byte();
    const type = head & 0x0f;
    if (type === 0) return { kind: "struct", fields };
    const delta = head >> 4;
    id = delta !== 0 ? id + delta : Number(r.zigzag());
    const value = readValue(r, type, false);
    fields.push({ id, type: type === TType.BOOL_FALSE ? TType.BOOL_TRUE : type, value });
  }
}

/** One struct starting at `offset`; `end` is where it stopped. */
export function readStruct(bytes: Uint8Array, offset = 0): { value: ThriftStruct; end: number } {
  const r = new Reader(bytes, offset);
  const value = readStructAt(r);
  return { value, end: r.at };
}

class Writer {
  private buf = new Uint8Array(1024);
  length = 0;
  private room(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.length + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.length));
    this.buf = next;
  }
  byte(b: number): void {
    this.room(1);
    this.buf[this.length++] = b & 0xff;
  }
  bytes(b: Uint8Array): void {
    this.room(b.length);
    this.buf.set(b, this.length);
    this.length += b.length;
  }
  varint(v: bigint): void {
    let x = BigInt.asUintN(64, v);
    while (x >= 0x80n) {
      this.byte(Number(x & 0x7fn) | 0x80);
      x >>= 7n;
    }
    this.byte(Number(x));
  }
  zigzag(v: bigint): void {
    this.varint((v << 1n) ^ (v >> 63n));
  }
  result(): Uint8Array {
    return this.buf.slice(0, this.length);
  }
}

function expect<T>(ok: boolean, value: unknown, what: string): T {
  if (!ok) throw new ThriftError(`thrift: ${what} expected, got ${typeof value}`);
  return value as T;
}

function writeValue(w: Writer, type: number, value: ThriftValue, inCollection: boolean): void {
  switch (type) {
    case TType.BOOL_TRUE:
    case TType.BOOL_FALSE:
      // A field's boolean travels in its header; a collection's is a byte.
      if (inCollection) w.byte(expect<number>(typeof value === "number", value, "boolean byte"));
      return;
    case TType.BYTE:
      w.byte(expect<number>(typeof value === "number", value, "byte"));
      return;
    case TType.I16:
    case TType.I32:
      w.zigzag(BigInt(expect<number>(typeof value === "number", value, "integer")));
      return;
    case TType.I64:
      w.zigzag(expect<bigint>(typeof value === "bigint", value, "bigint"));
      return;
    case TType.DOUBLE: {
      const b = new Uint8Array(8);
      new DataView(b.buffer).setFloat64(0, expect<number>(typeof value === "number", value, "double"), true);
      w.bytes(b);
      return;
    }
    case TType.BINARY: {
      const b = expect<Uint8Array>(value instanceof Uint8Array, value, "binary");
      w.varint(BigInt(b.length));
      w.bytes(b);
      return;
    }
    case TType.LIST:
    case TType.SET: {
      const list = value as ThriftList;
      const n = list.items.length;
      if (n < 15) w.byte((n << 4) | list.elemType);
      else {
        w.byte(0xf0 | list.elemType);
        w.varint(BigInt(n));
      }
      for (const item of list.items) writeValue(w, list.elemType, item, true);
      return;
    }
    case TType.MAP: {
      const map = value as ThriftMap;
      w.varint(BigInt(map.entries.length));
      if (map.entries.length > 0) w.byte((map.keyType << 4) | map.valueType);
      for (const [k, v] of map.entries) {
        writeValue(w, map.keyType, k, true);
        writeValue(w, map.valueType, v, true);
      }
      return;
    }
    case TType.STRUCT:
      writeStructTo(w, value as ThriftStruct);
      return;
    default:
      throw new ThriftError(`thrift: unknown type ${type}`);
  }
}

function writeStructTo(w: Writer, s: ThriftStruct): void {
  let last = 0;
  for (const f of s.fields) {
    const type =
      f.type === TType.BOOL_TRUE || f.type === TType.BOOL_FALSE
        ? f.value === true
          ? TType.BOOL_TRUE
          : TType.BOOL_FALSE
        : f.type;
    const delta = f.id - last;
    if (delta > 0 && delta <= 15) w.byte((delta << 4) | type);
    else {
      w.byte(type);
      w.zigzag(BigInt(f.id));
    }
    writeValue(w, type, f.value, false);
    last = f.id;
  }
  w.byte(0);
}

export function writeStruct(s: ThriftStruct): Uint8Array {
  const w = new Writer();
  writeStructTo(w, s);
  return w.result();
}

// --- helpers for rewriting known fields ------------------------------------

export function field(s: ThriftStruct, id: number): ThriftField | undefined {
  return s.fields.find((f) => f.id === id);
}

/** Sets field `id` (inserted in id order when absent). */
export function setField(s: ThriftStruct, id: number, type: number, value: ThriftValue): void {
  const f = field(s, id);
  if (f) {
    f.value = value;
    return;
  }
  const at = s.fields.findIndex((x) => x.id > id);
  const next: ThriftField = { id, type, value };
  if (at < 0) s.fields.push(next);
  else s.fields.splice(at, 0, next);
}

export function removeField(s: ThriftStruct, id: number): void {
  const at = s.fields.findIndex((f) => f.id === id);
  if (at >= 0) s.fields.splice(at, 1);
}

export function structField(s: ThriftStruct, id: number): ThriftStruct | undefined {
  const v = field(s, id)?.value;
  return v !== undefined && typeof v === "object" && !(v instanceof Uint8Array) && v.kind === "struct" ? v : undefined;
}

export function listField(s: ThriftStruct, id: number): ThriftList | undefined {
  const v = field(s, id)?.value;
  return v !== undefined &&
    typeof v === "object" &&
    !(v instanceof Uint8Array) &&
    (v.kind === "list" || v.kind === "set")
    ? v
    : undefined;
}

/** An i64 (or i32) field as a bigint; undefined when absent. */
export function intField(s: ThriftStruct, id: number): bigint | undefined {
  const v = field(s, id)?.value;
  if (typeof v === "bigint") return v;
  if (typeof v === "number") return BigInt(v);
  return undefined;
}
