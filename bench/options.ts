// Command-line options of `npm run bench`.
export interface BenchOptions {
  /** Smaller sizes: the whole run in under three minutes. */
  readonly quick: boolean;
  /** Run only the benchmarks whose group is listed (the group names are bench/run.ts's `groups`, checked there). */
  readonly only: ReadonlySet<string> | undefined;
  /** The store sizes of the `scale` group, as written (`--sizes=200k,2m`); unset = its default. */
  readonly sizes?: string | undefined;
}

export function parseOptions(argv: readonly string[]): BenchOptions {
  let quick = false;
  let only: Set<string> | undefined;
  let sizes: string | undefined;
  for (const arg of argv) {
    if (arg === "--quick") quick = true;
    else if (arg.startsWith("--only=")) only = new Set(arg.slice("--only=".length).split(","));
    else if (arg.startsWith("--sizes=")) sizes = arg.slice("--sizes=".length);
    else throw new Error(`unknown option ${arg} (use --quick, --only=<group>,<group>..., --sizes=200k,2m)`);
  }
  return { quick, only, sizes };
}
