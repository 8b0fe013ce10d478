// The value buffers of Arrow columns, filled without a heap object per
// value: the export builds tens of thousands of rows a second on the main
// thread, and per-value Uint8Arrays and BigInts were most of its cost.
import { digits, stampMicros, stampMicrosNumber } from "../time.js";

export interface Utf8Buffers {
  /** Byte offset of each value's start, plus the end: length n + 1. */
  readonly offsets: Int32Array;
  readonly data: Uint8Array;
}

/** UTF-8 bytes of `values` back to back; null and "" take no bytes. */
export function utf8Buffers(values: readonly (string | null)[]): Utf8Buffers {
  const n = values.length;
  const offsets = new Int32Array(n + 1);
  const parts: string[] = [];
  let units = 0;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v) {
      units += v.length;
      parts.push(v);
    }
    offsets[i + 1] = units;
  }
  // One encode of the whole column. A UTF-16 code unit never takes fewer
  // than one byte, and takes exactly one only when it is ASCII: equal counts
  // mean the offsets in code units above are the byte offsets.
  const joined = Buffer.from(parts.join(""), "utf8");
  if (joined.length === units) return { offsets, data: joined };
  // Not all ASCII: encode value by value (a lone surrogate at the end of one
  // value must not pair with one at the start of the next). 3 bytes per code
  // unit is the most UTF-8 needs, so the buffer is never too short.
  const data = Buffer.allocUnsafe(units * 3);
  let at = 0;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v) at += data.write(v, at, "utf8");
    offsets[i + 1] = at;
  }
  return { offsets, data: data.subarray(0, at) };
}

const TWO_32 = 4294967296;
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** A decimal integer string ("-"? digits) of at most 15 digits as a Number; NaN otherwise. */
function shortDecimal(s: string): number {
  const neg = s.charCodeAt(0) === 45; /* - */
  const start = neg ? 1 : 0;
  if (s.length === start || s.length - start > 15) return NaN;
  const n = digits(s, start, s.length);
  return neg ? -n : n;
}

function setInt64(out: BigInt64Array, words: Uint32Array, i: number, num: number): void {
  if (!LITTLE_ENDIAN) {
    out[i] = BigInt(num);
    return;
  }
  // Two 32-bit halves instead of a BigInt per value; the high word of a
  // negative value wraps to its two's complement in the Uint32Array.
  const hi = Math.floor(num / TWO_32);
  words[2 * i] = num - hi * TWO_32;
  words[2 * i + 1] = hi;
}

/**
 * An int64 value buffer from decimal strings, safe-integer Numbers or
 * BigInts (null = 0; the validity bitmap says it is null). Values that are
 * neither go through BigInt(), which throws on what is not an integer.
 */
export function int64Buffer(values: readonly (string | number | bigint | null)[]): BigInt64Array {
  const n = values.length;
  const out = new BigInt64Array(n);
  const words = new Uint32Array(out.buffer);
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v === null || v === undefined) continue;
    if (typeof v === "bigint") {
      out[i] = v;
      continue;
    }
    const num = typeof v === "number" ? (Number.isSafeInteger(v) ? v : NaN) : shortDecimal(v);
    if (Number.isNaN(num)) out[i] = BigInt(v);
    else setInt64(out, words, i, num);
  }
  return out;
}

function notAStamp(v: string): never {
  throw new RangeError(`not a timestamp: ${JSON.stringify(v.slice(0, 40))}`);
}

/** A timestamp (microseconds, UTC) value buffer from stamps; null = 0. */
export function timestampBuffer(values: readonly (string | null)[]): BigInt64Array {
  const n = values.length;
  const out = new BigInt64Array(n);
  const words = new Uint32Array(out.buffer);
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v === null || v === undefined) continue;
    const num = stampMicrosNumber(v);
    if (Number.isNaN(num)) out[i] = stampMicros(v) ?? notAStamp(v);
    else setInt64(out, words, i, num);
  }
  return out;
}
