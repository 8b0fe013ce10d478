// Timing and the one result line per benchmark that a script can check:
//   bench <name>: ratio <x> target >= <t>     (or <=)
// Times are printed only as context, never as the result.

export interface Result {
  readonly name: string;
  readonly ratio: number;
  readonly op: ">=" | "<=";
  readonly target: number;
  /** Printed after the line for a human; not part of the contract. */
  readonly note?: string;
  /** A measured value (ms), printed bare: `bench <name>: <value> target <= <t>` (the scale bench's ceilings). */
  readonly bare?: boolean;
}

export function passed(r: Result): boolean {
  return r.op === ">=" ? r.ratio >= r.target : r.ratio <= r.target;
}

export function resultLine(r: Result): string {
  if (r.bare === true) return `bench ${r.name}: ${r.ratio.toFixed(2)} target ${r.op} ${r.target}`;
  return `bench ${r.name}: ratio ${r.ratio.toFixed(3)} target ${r.op} ${r.target}`;
}

export function context(text: string): void {
  process.stdout.write(`  ${text}\n`);
}

export async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; seconds: number }> {
  const start = process.hrtime.bigint();
  const value = await fn();
  return { value, seconds: Number(process.hrtime.bigint() - start) / 1e9 };
}

/** Latencies of `runs` sequential calls after `warmup` untimed ones, in ms. */
export async function latencies(
  fn: (i: number) => Promise<unknown>,
  runs: number,
  warmup = Math.ceil(runs / 10),
): Promise<number[]> {
  for (let i = 0; i < warmup; i++) await fn(i);
  const out: number[] = [];
  for (let i = 0; i < runs; i++) {
    const start = process.hrtime.bigint();
    await fn(warmup + i);
    out.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  return out;
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : ((s[mid - 1] ?? 0) + (s[mid] ?? 0)) / 2;
}

export function percentile(xs: readonly number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
}

export function fmt(n: number, digits = 0): string {
  return n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

export function mb(bytes: number): string {
  return `${fmt(bytes / 1024 / 1024)} MB`;
}

/** One variant of an interleaved benchmark: call i, answering how many items it got. */
export interface Variant {
  readonly name: string;
  run(i: number): Promise<number>;
}

/**
 * Latencies in ms by variant name: `calls` rounds after a tenth as many
 * untimed warm-up rounds, each round calling every variant once, so a
 * change of load on the machine hits every variant alike. Each round starts
 * one variant further on: what a call leaves behind in this process (the
 * garbage of decoding a large answer, collected during the next call) does
 * not always fall on the same variant. Every call must answer `expected`
 * items (`what` names them in the error).
 */
export async function interleaved(
  variants: readonly Variant[],
  calls: number,
  expected: number,
  what: string,
): Promise<Map<string, number[]>> {
  const warmup = Math.ceil(calls / 10);
  const times = new Map(variants.map((v) => [v.name, [] as number[]]));
  for (let i = 0; i < warmup + calls; i++) {
    for (let k = 0; k < variants.length; k++) {
      const v = variants[(i + k) % variants.length]!;
      const start = process.hrtime.bigint();
      const n = await v.run(i);
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      if (n !== expected) throw new Error(`${v.name} returned ${n} ${what}, expected ${expected}`);
      if (i >= warmup) times.get(v.name)!.push(ms);
    }
  }
  return times;
}

/** Prints each variant's median and p95; answers the median of a variant by name. */
export function summarise(times: ReadonlyMap<string, readonly number[]>): (name: string) => number {
  for (const [name, xs] of times)
    context(`${name}: median ${fmt(median(xs), 2)} ms, p95 ${fmt(percentile(xs, 95), 2)} ms`);
  return (name) => median(times.get(name) ?? []);
}
