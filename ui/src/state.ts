// The view's one piece of shared state: the read point (`as_of`) of the
// whole page, kept in the URL (?as_of=...) so a view can be shared, plus
// the resource open in the detail panel (?id=...). Panels subscribe.
type Listener = () => void;
const listeners: Listener[] = [];

function params(): URLSearchParams {
  return new URLSearchParams(location.search);
}

export function asOf(): string | undefined {
  return params().get("as_of") ?? undefined;
}

export function selected(): string | undefined {
  return params().get("id") ?? undefined;
}

function write(change: (p: URLSearchParams) => void): void {
  const p = params();
  change(p);
  const query = p.toString();
  history.pushState(null, "", query === "" ? location.pathname : `${location.pathname}?${query}`);
  for (const l of listeners) l();
}

export function setAsOf(value: string | undefined): void {
  if (value === asOf()) return;
  write((p) => (value === undefined ? p.delete("as_of") : p.set("as_of", value)));
}

export function select(id: string | undefined): void {
  if (id === selected()) return;
  write((p) => (id === undefined ? p.delete("id") : p.set("id", id)));
}

export function subscribe(l: Listener): void {
  listeners.push(l);
}

window.addEventListener("popstate", () => {
  for (const l of listeners) l();
});

/** RFC 3339 as the API reads it: a date, a time with up to microseconds, Z or an offset. */
export const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$/;

/** Microseconds since the epoch of an RFC 3339 UTC stamp such as the API writes. */
export function micros(stamp: string): bigint {
  const m = /^(.*T\d{2}:\d{2}:\d{2})(?:\.(\d{1,6}))?(Z|[+-]\d{2}:\d{2})$/.exec(stamp);
  if (m === null) throw new Error(`not an RFC 3339 time: ${stamp}`);
  const ms = Date.parse(`${m[1]}${m[3]}`);
  return BigInt(ms) * 1000n + BigInt((m[2] ?? "").padEnd(6, "0"));
}

/** The RFC 3339 UTC stamp, with microseconds, of microseconds since the epoch. */
export function stamp(us: bigint): string {
  const ms = us / 1000n;
  const seconds = new Date(Number((ms / 1000n) * 1000n)).toISOString().slice(0, 19);
  return `${seconds}.${String(us % 1_000_000n).padStart(6, "0")}Z`;
}
