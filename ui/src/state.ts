// The view's one piece of shared state: the read point (`as_of`) of the
// whole page, kept in the URL (?as_of=...) so a view can be shared, plus
// the resource open in the detail panel (?id=...). Panels subscribe.
// Opening a resource is a step in the browser's history; moving through
// time replaces the current entry (a drag of the slider is not 50 steps).
// Panels also report the instants of the changes they show (marks), which
// the time slider steps through.
/** Why listeners are told: the read point moved, the selection changed, or the reader asked to read again. */
export type Change = "time" | "select" | "refresh";
type Listener = (why: Change) => void;
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

function tell(why: Change): void {
  for (const l of listeners) l(why);
}

function write(why: Change, change: (p: URLSearchParams) => void): void {
  const p = params();
  change(p);
  const query = p.toString();
  const url = query === "" ? location.pathname : `${location.pathname}?${query}`;
  if (why === "time") history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  tell(why);
}

export function setAsOf(value: string | undefined): void {
  if (value === asOf()) return;
  write("time", (p) => (value === undefined ? p.delete("as_of") : p.set("as_of", value)));
}

export function select(id: string | undefined): void {
  if (id === selected()) return;
  write("select", (p) => (id === undefined ? p.delete("id") : p.set("id", id)));
}

/** Every panel reads again at the same read point ("Now" at now: what changed since the page read it). */
export function refresh(): void {
  tell("refresh");
}

export function subscribe(l: Listener): void {
  listeners.push(l);
}

window.addEventListener("popstate", () => tell("time"));

/**
 * The instants of the changes the panels have shown: the time slider's marks.
 * Kept while the page is open (moving back in time shows fewer resources,
 * and the marks must not move under a dragged slider).
 */
const marks = new Set<string>();
const markListeners: (() => void)[] = [];

/** Adds instants a panel shows (RFC 3339 UTC stamps as the API writes them). */
export function addMarks(stamps: readonly string[]): void {
  const before = marks.size;
  for (const s of stamps) if (RFC3339.test(s)) marks.add(s);
  if (marks.size !== before) for (const l of markListeners) l();
}

/** Every instant shown, oldest first, each once. */
export function allMarks(): string[] {
  return [...marks].sort((a, b) => (micros(a) < micros(b) ? -1 : micros(a) > micros(b) ? 1 : 0));
}

export function onMarks(l: () => void): void {
  markListeners.push(l);
}

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
