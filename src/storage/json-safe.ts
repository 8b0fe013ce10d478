// Parquet values as JSON that survives every client: JSON numbers are
// doubles, so an int64 that a double cannot hold exactly travels as a decimal
// string; bytes become base64; timestamps RFC 3339 strings.
import type { JsonValue } from "@bufbuild/protobuf";

const EPOCH_DAY_MS = 86_400_000;

/** RFC 3339 UTC from a count of `unitsPerSecond` ticks since the epoch. */
export function formatTimestamp(ticks: bigint, unitsPerSecond: bigint, fractionDigits: number): string {
  let seconds = ticks / unitsPerSecond;
  let rest = ticks % unitsPerSecond;
  if (rest < 0n) {
    // BigInt division truncates; timestamps before 1970 need the floor.
    seconds -= 1n;
    rest += unitsPerSecond;
  }
  const date = new Date(Number(seconds) * 1000);
  if (Number.isNaN(date.getTime())) return ticks.toString();
  const iso = date.toISOString(); // ...T00:00:00.000Z, years past 9999 with a sign
  const scale = 10n ** BigInt(fractionDigits);
  const fraction = ((rest * scale) / unitsPerSecond).toString().padStart(fractionDigits, "0");
  return `${iso.slice(0, -5)}.${fraction}Z`;
}

/** `YYYY-MM-DD` from days since the epoch. */
export function formatDate(days: number): string {
  const date = new Date(days * EPOCH_DAY_MS);
  return Number.isNaN(date.getTime()) ? String(days) : date.toISOString().slice(0, -14);
}

/** A bigint as a JSON number when a double holds it exactly, else a decimal string. */
export function bigintToJson(value: bigint): number | string {
  const n = Number(value);
  return BigInt(n) === value ? n : value.toString();
}

/** Any value hyparquet produces (with the parsers of parquet-preview.ts) as JSON. */
export function toJsonSafe(value: unknown): JsonValue {
  if (value === null || value === undefined) return null;
  switch (typeof value) {
    case "string":
    case "boolean":
      return value;
    case "number":
      // proto3 JSON spells non-finite doubles as strings.
      return Number.isFinite(value) ? value : String(value);
    case "bigint":
      return bigintToJson(value);
    case "symbol":
    case "function":
      return String(value);
    case "object":
      break;
  }
  if (value instanceof Uint8Array)
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString("base64");
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : value.toISOString();
  if (Array.isArray(value) || ArrayBuffer.isView(value)) {
    return Array.from(value as ArrayLike<unknown>, toJsonSafe);
  }
  if (value instanceof Map) {
    const out: { [k: string]: JsonValue } = {};
    for (const [k, v] of value) out[String(k)] = toJsonSafe(v);
    return out;
  }
  const out: { [k: string]: JsonValue } = {};
  for (const [k, v] of Object.entries(value)) out[k] = toJsonSafe(v);
  return out;
}
