// `npm run bench [-- --quick] [-- --only=create,read]`: every benchmark on
// PostgreSQL, each ending with `bench <name>: ratio <x> target >= <t>` (or
// <=). The exit code is 0 even when a target is missed: the figures are the
// output, and BENCHMARKS.md explains each miss.
import { cpus, totalmem } from "node:os";
import { accessBenchmarks } from "./access.bench.js";
import { auditBenchmarks } from "./audit.bench.js";
import { cliImportBenchmarks } from "./cli-import.bench.js";
import { createBenchmarks } from "./create.bench.js";
import { dicomBenchmarks } from "./dicom.bench.js";
import { dumpBenchmarks } from "./dump.bench.js";
import { eventsBenchmarks } from "./events.bench.js";
import { historyBenchmarks } from "./history.bench.js";
import { loadBenchmarks } from "./load.bench.js";
import { parseOptions } from "./options.js";
import { pgliteBenchmarks } from "./pglite.bench.js";
import { parquetBenchmarks } from "./parquet.bench.js";
import { queryBenchmarks } from "./query.bench.js";
import { readBenchmarks } from "./read.bench.js";
import { replicaBenchmarks } from "./replica.bench.js";
import { scaleBenchmarks } from "./scale.bench.js";
import { writersBenchmarks } from "./writers.bench.js";
import { serverVersion } from "./support/database.js";
import { passed, resultLine, type Result } from "./support/measure.js";
import type { BenchOptions } from "./options.js";

const groups: { name: string; run: (opts: BenchOptions) => Promise<Result[]> }[] = [
  { name: "create", run: createBenchmarks },
  { name: "read", run: readBenchmarks },
  { name: "history", run: historyBenchmarks },
  { name: "audit", run: auditBenchmarks },
  { name: "query", run: queryBenchmarks },
  { name: "parquet", run: parquetBenchmarks },
  { name: "pglite", run: pgliteBenchmarks },
  { name: "events", run: eventsBenchmarks },
  { name: "cli", run: cliImportBenchmarks },
  { name: "replica", run: replicaBenchmarks },
  { name: "access", run: accessBenchmarks },
  { name: "load", run: loadBenchmarks },
  { name: "writers", run: writersBenchmarks },
  { name: "dump", run: dumpBenchmarks },
  // Not in a plain run: it builds a 2M store (`--only=scale`, `--sizes=200k` for a quick one).
  { name: "scale", run: scaleBenchmarks },
  { name: "dicom", run: dicomBenchmarks },
];

async function main(): Promise<void> {
  const opts = parseOptions(process.argv.slice(2));
  const unknown = [...(opts.only ?? [])].filter((name) => !groups.some((g) => g.name === name));
  if (unknown.length > 0)
    throw new Error(`unknown group ${unknown.join(", ")} (groups: ${groups.map((g) => g.name).join(", ")})`);
  const started = Date.now();
  process.stdout.write(
    `machine: ${cpus().length} cpus (${cpus()[0]?.model ?? "?"}), ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}, PostgreSQL ${await serverVersion()}${opts.quick ? ", --quick" : ""}\n`,
  );
  const all: Result[] = [];
  for (const g of groups) {
    if (opts.only && !opts.only.has(g.name)) continue;
    if (!opts.only && g.name === "scale") continue;
    process.stdout.write(`\n== ${g.name}\n`);
    const t = Date.now();
    const results = await g.run(opts);
    for (const r of results) {
      process.stdout.write(`${resultLine(r)}\n`);
      if (!passed(r)) process.stdout.write("  missed: see BENCHMARKS.md\n");
      if (r.note) process.stdout.write(`  ${r.note}\n`);
    }
    process.stdout.write(`  (${((Date.now() - t) / 1000).toFixed(0)} s)\n`);
    all.push(...results);
  }
  process.stdout.write(`\n== summary (${((Date.now() - started) / 1000).toFixed(0)} s)\n`);
  for (const r of all) process.stdout.write(`${resultLine(r)}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
