// Time, in one neutral module every layer may import: the as_of read point
// (RFC 3339 with "Z" or a numeric offset, fraction optional up to 9 digits,
// truncated to microseconds, the database's resolution) and the one
// conversion of a timestamp to microseconds since the epoch; and what a
// calendar date is (payload dates and as_of share it).
import { invalidArgument } from "./errors.js";

/** A real calendar date YYYY-MM-DD. */
export function isCalendarDate(s: string): boolean {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s);
  if (!m) return false;
  const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (mo < 1 || mo > 12 || d < 1) return false;
  const leap = (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1] ?? 0;
  return d <= days;
}

const RFC3339 = /^(\d{4}-\d{2}-\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

/** Returns the read point in a form PostgreSQL parses exactly: YYYY-MM-DDTHH:MM:SS.ffffff+HH:MM. */
export function parseAsOf(value: string): string {
  const m = RFC3339.exec(value);
  const bad = () =>
    invalidArgument(`as_of ${JSON.stringify(value)} is not an RFC 3339 timestamp with Z or an offset`, "INVALID_AS_OF");
  if (!m) throw bad();
  const [, date = "", hh = "", mi = "", ss = "", frac = "", z, sign, oh = "", om = ""] = m;
  // Year 0000 does not exist in PostgreSQL's calendar; a leap second (60) is allowed by RFC 3339.
  if (!isCalendarDate(date) || date.startsWith("0000")) throw bad();
  if (Number(hh) > 23 || Number(mi) > 59 || Number(ss) > 60) throw bad();
  if (!z && (Number(oh) > 23 || Number(om) > 59)) throw bad();
  const micros = (frac + "000000").slice(0, 6);
  const offset = z ? "+00:00" : `${sign}${oh}:${om}`;
  return `${date}T${hh}:${mi}:${ss}.${micros}${offset}`;
}

/** parseAsOf for an optional field: only an absent value means now ("" is malformed). */
export function optionalAsOf(value: string | undefined): string | undefined {
  return value === undefined ? undefined : parseAsOf(value);
}

/** The decimal number in s[from, to), ASCII digits only; NaN if any other character is there. */
export function digits(s: string, from: number, to: number): number {
  let n = 0;
  for (let i = from; i < to; i++) {
    const d = s.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return NaN;
    n = n * 10 + d;
  }
  return n;
}

/** Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * ((month + 9) % 12) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

/**
 * The fast path of stampMicros for the stamps the database writes
 * ("YYYY-MM-DDTHH:MM:SS.ffffffZ"): an exact integer Number, without a BigInt;
 * NaN for any other shape, an out-of-range field, or an instant outside
 * 1685-2255, where microseconds pass 2^53 (stampMicros handles those).
 */
export function stampMicrosNumber(s: string): number {
  if (s.length !== 27 || s.charCodeAt(26) !== 90 /* Z */ || s.charCodeAt(19) !== 46 /* . */) return NaN;
  if (s[4] !== "-" || s[7] !== "-" || s[10] !== "T" || s[13] !== ":" || s[16] !== ":") return NaN;
  const year = digits(s, 0, 4);
  const month = digits(s, 5, 7);
  const day = digits(s, 8, 10);
  const hour = digits(s, 11, 13);
  const minute = digits(s, 14, 16);
  const second = digits(s, 17, 19);
  const micros = digits(s, 20, 26);
  // NaN fails every comparison, so a non-digit lands here too.
  if (!(
    month >= 1 &&
    month <= 12 &&
    day >= 1 &&
    day <= 31 &&
    hour <= 23 &&
    minute <= 59 &&
    second <= 59 &&
    micros >= 0
  ))
    return NaN;
  const seconds = ((daysFromCivil(year, month, day) * 24 + hour) * 60 + minute) * 60 + second;
  const value = seconds * 1_000_000 + micros;
  return Number.isSafeInteger(value) ? value : NaN;
}

const STAMP = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\.(\d{6})(Z|[+-]\d{2}:\d{2})$/;

/**
 * Microseconds since the epoch of a stamp YYYY-MM-DDTHH:MM:SS.ffffff(Z|±HH:MM)
 * (what the database writes and parseAsOf returns), exact at any date;
 * undefined when it is no such stamp (-infinity, anything else).
 */
export function stampMicros(s: string): bigint | undefined {
  const fast = stampMicrosNumber(s);
  if (!Number.isNaN(fast)) return BigInt(fast);
  const m = STAMP.exec(s);
  if (!m) return undefined;
  const ms = Date.parse(`${m[1]}${m[3]}`);
  return Number.isNaN(ms) ? undefined : BigInt(ms) * 1000n + BigInt(m[2] as string);
}
