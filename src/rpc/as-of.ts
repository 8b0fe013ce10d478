// The as_of read point: RFC 3339 with "Z" or a numeric offset, fraction
// optional (up to 9 digits, truncated to microseconds, the database's
// resolution). Anything else, including impossible dates, is invalid_argument.
import { invalidArgument } from "../errors.js";
import { isCalendarDate } from "../schema/validate.js";

const RFC3339 = /^(\d{4}-\d{2}-\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

/** Returns the read point in a form PostgreSQL parses exactly: YYYY-MM-DDTHH:MM:SS.ffffff+HH:MM. */
export function parseAsOf(value: string): string {
  const m = RFC3339.exec(value);
  const bad = () => invalidArgument(`as_of ${JSON.stringify(value)} is not an RFC 3339 timestamp with Z or an offset`);
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
