// `resource-store import` of a million-line NDJSON file
// (the create benchmark's resources: series and their files, flat), as a
// ratio to the gRPC create benchmark's rows/s measured in the same run, on
// PostgreSQL, writing the same number of rows (the create benchmark's
// batches of 1,000, two in flight). The gRPC rate is taken half before and
// half after the import, so a change of load on the machine hits both
// alike. Target >= 0.8.
import { spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { serviceWriter, type Writer } from "./create.bench.js";
import { connect, withDatabase } from "./support/database.js";
import { context, fmt, mb, timed, type Result } from "./support/measure.js";
import { processMemory, startServer } from "./support/server.js";
import { resourceAt, toFlat } from "./support/workload.js";
import type { BenchOptions } from "./options.js";

export const CLI_IMPORT_TARGET = 0.8;
const BIN = fileURLToPath(new URL("../bin/resource-store.js", import.meta.url));
const BATCH = 1000;
const CONCURRENCY = 2;

async function writeNdjson(file: string, rows: number): Promise<void> {
  const out = createWriteStream(file);
  let buf = "";
  for (let i = 0; i < rows; i++) {
    buf += `${JSON.stringify(toFlat(resourceAt("cli", i, BATCH)))}\n`;
    if (buf.length > 1 << 20) {
      if (!out.write(buf)) await new Promise<void>((r) => out.once("drain", () => r()));
      buf = "";
    }
  }
  out.end(buf);
  await new Promise<void>((r) => out.once("finish", () => r()));
}

/** Runs the built command; returns its wall time and peak memory (VmHWM of the child). */
async function importWithCli(url: string, file: string): Promise<{ seconds: number; stdout: string; peak: number }> {
  let peak = 0;
  const { value, seconds } = await timed(
    () =>
      new Promise<string>((resolve, reject) => {
        const child = spawn(
          process.execPath,
          [
            BIN,
            "--quiet",
            "--url",
            url,
            "import",
            file,
            "--batch-size",
            String(BATCH),
            "--concurrency",
            String(CONCURRENCY),
          ],
          {
            stdio: ["ignore", "pipe", "pipe"],
          },
        );
        let stdout = "";
        let stderr = "";
        child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
        child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
        child.once("exit", (code) => {
          clearInterval(poll);
          if (code === 0) resolve(stdout);
          else reject(new Error(`import exited ${String(code)}: ${stderr}`));
        });
        const poll = setInterval(() => {
          processMemory(child.pid!).then(
            (m) => (peak = Math.max(peak, m.peak)),
            () => {},
          );
        }, 500);
      }),
  );
  return { seconds, stdout: value, peak };
}

async function grpcRate(write: Writer, first: number, last: number): Promise<{ rows: number; seconds: number }> {
  let next = first;
  const { seconds } = await timed(() =>
    Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < last) await write(next++);
      }),
    ),
  );
  return { rows: (last - first) * BATCH, seconds };
}

async function countResources(url: string): Promise<number> {
  const c = await connect(url);
  try {
    const { rows } = await c.query<{ n: string }>("SELECT count(*) AS n FROM resources");
    return Number(rows[0]?.n);
  } finally {
    await c.end();
  }
}

export async function cliImportBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const rows = opts.quick ? 100_000 : 1_000_000;
  // The reference writes as many rows as the import, into a database of its
  // own: inserts get slower as the tables and their indexes grow, so a
  // smaller reference would flatter itself.
  const grpcBatches = rows / BATCH;
  context(
    `resource-store import: ${fmt(rows)} NDJSON lines (10 series + 990 files a batch of ${fmt(BATCH)}), ${CONCURRENCY} batches in flight; ` +
      `gRPC create of ${fmt(grpcBatches * BATCH)} rows (half before, half after) as the reference`,
  );
  const dir = await mkdtemp(join(tmpdir(), "rs-bench-cli-"));
  try {
    const file = join(dir, "import.ndjson");
    await writeNdjson(file, rows);
    context(`input: ${mb((await stat(file)).size)}`);
    return await withDatabase((grpcDb) =>
      withDatabase(async (cliDb) => {
        const grpcServer = await startServer({ databaseUrl: grpcDb.url });
        const cliServer = await startServer({ databaseUrl: cliDb.url });
        try {
          const write = serviceWriter("grpc", grpcServer.url, "grpc", grpcBatches, BATCH);
          const half = Math.floor(grpcBatches / 2);
          const a = await grpcRate(write, 0, half);
          const cli = await importWithCli(cliServer.url, file);
          const b = await grpcRate(write, half, grpcBatches);
          if (cli.stdout.trim() !== `imported ${rows}`) throw new Error(`import said ${JSON.stringify(cli.stdout)}`);
          const stored = await countResources(cliDb.url);
          if (stored !== rows) throw new Error(`import stored ${stored} resources, expected ${rows}`);
          const grpc = (a.rows + b.rows) / (a.seconds + b.seconds);
          const imported = rows / cli.seconds;
          context(
            `gRPC create: ${fmt(grpc)} rows/s (${fmt(a.rows / a.seconds)} before, ${fmt(b.rows / b.seconds)} after)`,
          );
          context(
            `resource-store import: ${fmt(imported)} rows/s (${fmt(cli.seconds, 1)} s), command peak RSS ${mb(cli.peak)}`,
          );
          return [{ name: "cli-import", ratio: imported / grpc, op: ">=", target: CLI_IMPORT_TARGET }];
        } finally {
          await Promise.all([grpcServer.close(), cliServer.close()]);
        }
      }),
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
