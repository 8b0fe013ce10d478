// The `resource-store` command: global options, one sub-command per task of
// docs/contract/17-command-line.md, an example in every --help.
import { Command, InvalidArgumentError, Option } from "commander";
import {
  CliError,
  clientFor,
  describeError,
  resolveGlobals,
  summary,
  warn,
  type GlobalOptions,
  type RawGlobals,
} from "./common.js";
import { runExport } from "./export.js";
import { runImport } from "./import.js";
import { createProgress } from "./progress.js";
import { runUploadDir } from "./upload-dir.js";
import { runWatch } from "./watch.js";
import { registryCommand } from "./registry-command.js";
import { dumpCommand, restoreCommand } from "./dump.js";
import { historyCommand } from "./history.js";

/** Operator commands: they open the database themselves (DATABASE_URL), not the service. */
const OPERATOR_COMMANDS: (() => Command)[] = [() => registryCommand(), () => dumpCommand(), () => restoreCommand()];

function positiveInt(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1) throw new InvalidArgumentError("must be a positive integer.");
  return Number(value);
}

function nonNegativeInt(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError("must be a whole number.");
  return Number(value);
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

function globalsOf(cmd: Command): GlobalOptions {
  return resolveGlobals(cmd.optsWithGlobals<RawGlobals>());
}

/** Runs a sub-command's body: a failure is one `error:` line on stderr and a non-zero exit. */
async function run(cmd: Command, body: (g: GlobalOptions) => Promise<void>): Promise<void> {
  let g: GlobalOptions | undefined;
  try {
    g = globalsOf(cmd);
    await body(g);
  } catch (err) {
    warn(`error: ${describeError(err, g?.url)}`);
    process.exitCode = err instanceof CliError ? err.exitCode : 1;
  }
}

function example(cmd: Command, ...lines: string[]): Command {
  return cmd.addHelpText(
    "after",
    `\nExample${lines.length > 1 ? "s" : ""}:\n${lines.map((l) => `  $ ${l}`).join("\n")}\n`,
  );
}

export function buildProgram(): Command {
  const program = new Command("resource-store")
    .description("Bulk import, export, upload and watch for the resource store (docs/contract/17-command-line.md).")
    .addOption(new Option("--url <url>", "service URL (default: $RESOURCE_STORE_URL, else http://127.0.0.1:8080)"))
    .addOption(
      new Option(
        "--token-file <file>",
        "bearer token: the first line of FILE (order: --token-file, --token, $RESOURCE_STORE_TOKEN)",
      ),
    )
    .addOption(
      new Option(
        "--token <token>",
        "bearer token (visible to other users in ps: prefer --token-file or $RESOURCE_STORE_TOKEN)",
      ),
    )
    .addOption(new Option("--as-of <time>", "RFC 3339 read point for every read (export)"))
    .option("-q, --quiet", "no progress on stderr")
    .showHelpAfterError()
    .version("0.1.0");
  example(
    program,
    "resource-store import resources.ndjson",
    "resource-store export --payload-type file -o files.parquet",
  );

  example(
    program
      .command("serve")
      .description("start the service, as `npm start` does (configured by the environment: PORT, DATABASE_URL, ...)")
      .action(async () => {
        await import("../main.js");
      }),
    "PORT=8080 DATABASE_URL=postgres://localhost/store resource-store serve",
  );

  example(
    program
      .command("import")
      .description(
        "create resources from NDJSON (flat create shape, one a line), JSON arrays or parquet (as written by export)",
      )
      .argument("<file...>", "input files")
      .option("--batch-size <n>", "resources a create call", positiveInt, 1000)
      .option("--concurrency <n>", "batches in flight", positiveInt, 2)
      .option("--resume", "skip identifiers already active (re-run after a crash)", false)
      .action(
        async (files: string[], opts: { batchSize: number; concurrency: number; resume: boolean }, cmd: Command) =>
          run(cmd, async (g) => {
            const progress = createProgress("import", { quiet: g.quiet });
            let result;
            try {
              result = await runImport(clientFor(g), files, opts, progress, g.url);
            } finally {
              progress.stop();
            }
            if (result.skipped > 0 && !g.quiet) warn(`skipped ${result.skipped} already active`);
            summary(`imported ${result.imported}`);
            if (result.failed) process.exitCode = 1;
          }),
      ),
    "resource-store import series.ndjson files.ndjson --batch-size 1000 --concurrency 2",
    "resource-store import --resume files.ndjson   # after a crash: finishes without duplicates",
    "resource-store import export.parquet --url http://store:8080",
  );

  example(
    program
      .command("export")
      .description("run a query and write parquet (.parquet) or NDJSON (.ndjson)")
      .requiredOption("-o, --output <file>", "output file, .parquet or .ndjson")
      .option("--payload-type <type>", "only this payload type (its fields become columns)")
      .option(
        "--filter <field:op:value>",
        "a condition (repeatable; in/not_in take a,b,c; json:<JSON> for a raw value)",
        collect,
        [],
      )
      .option("--sort-by <field>", "sort field (default created_at)")
      .option("--sort-order <order>", "asc or desc (default desc)")
      .action(
        async (
          opts: { output: string; payloadType?: string; filter: string[]; sortBy?: string; sortOrder?: string },
          cmd: Command,
        ) =>
          run(cmd, async (g) => {
            const progress = createProgress("export", { quiet: g.quiet });
            let rows;
            try {
              rows = await runExport(
                clientFor(g, { withAsOf: true }),
                { ...opts, filters: opts.filter },
                progress,
                !g.quiet && process.stderr.isTTY,
              );
            } finally {
              progress.stop();
            }
            summary(`exported ${rows}`);
          }),
      ),
    "resource-store export --payload-type study --filter modality:eq:CT --sort-by study_date --sort-order asc -o ct.parquet",
    "resource-store export --as-of 2026-01-31T00:00:00Z -o snapshot.ndjson",
  );

  example(
    program
      .command("upload-dir")
      .description(
        "upload every file under DIR through presigned URLs and print the root (symbolic links only when they point to a file inside DIR)",
      )
      .argument("<dir>", "folder to upload")
      .requiredOption("--group <group>", "key prefix group, e.g. site-a/2026")
      .option("--concurrency <n>", "PUTs at once", positiveInt, 4)
      .option("--retries <n>", "retries of a failed PUT", nonNegativeInt, 4)
      .option("--create-files <parent>", "also create one `file` resource per object under this parent")
      .option("--batch-size <n>", "resources a create call with --create-files", positiveInt, 1000)
      .option(
        "--root <s3-root>",
        "upload into the root an earlier run printed: files already there with the same size are not sent again",
      )
      .action(
        async (
          dir: string,
          opts: {
            group: string;
            concurrency: number;
            retries: number;
            createFiles?: string;
            batchSize: number;
            root?: string;
          },
          cmd: Command,
        ) =>
          run(cmd, async (g) => {
            const progress = createProgress("upload", { quiet: g.quiet });
            let result;
            try {
              result = await runUploadDir(clientFor(g), dir, opts, progress, g.url, (root) => {
                progress.stop();
                process.stdout.write(`${root}\n`);
              });
            } finally {
              progress.stop();
            }
            if (opts.createFiles !== undefined && !g.quiet)
              warn(`created ${result.created} file resources under ${opts.createFiles}`);
            summary(`uploaded ${result.uploaded}`);
            if (result.failed) process.exitCode = 1;
          }),
      ),
    "resource-store upload-dir ./scans --group site-a/2026 --create-files series-17",
    "resource-store upload-dir ./scans --group site-a/2026 --root s3://bucket/site-a/2026/<id>/   # after an interruption: sends only what is missing",
  );

  example(
    program
      .command("import-dicom")
      .description(
        "file every DICOM object under DIR: registry, patient/study/series/file resources, objects through presigned URLs (docs/dicom.md)",
      )
      .argument(
        "<dir>",
        "folder of DICOM Part 10 files (any nesting, any names; DICOMDIR and other files are listed and skipped)",
      )
      .requiredOption("--datasource <id>", "the datasource the patients are registered in")
      .addOption(
        new Option("--access-level <level>", "access level of every resource created")
          .choices(["public", "internal", "restricted"])
          .default("internal"),
      )
      .option(
        "--deidentify",
        "also rewrite the stored headers by DICOM PS3.15 Annex E (basic profile); needs a key",
        false,
      )
      .option(
        "--deidentify-key-file <file>",
        "key for --deidentify's UID replacements (default: $DICOM_DEIDENTIFY_KEY)",
      )
      .option("--concurrency <n>", "files read and PUTs at once", positiveInt, 8)
      .option("--batch-size <n>", "instances filed together", positiveInt, 500)
      .option("--retries <n>", "retries of a failed PUT", nonNegativeInt, 4)
      .action(
        async (
          dir: string,
          opts: {
            datasource: string;
            accessLevel: "public" | "internal" | "restricted";
            deidentify: boolean;
            deidentifyKeyFile?: string;
            concurrency: number;
            batchSize: number;
            retries: number;
          },
          cmd: Command,
        ) =>
          run(cmd, async (g) => {
            const progress = createProgress("import-dicom", { quiet: g.quiet });
            let result;
            try {
              // Loaded on use: the DICOM parser is no cost to the other commands.
              const { runImportDicom } = await import("./import-dicom.js");
              result = await runImportDicom(clientFor(g), dir, opts, progress, g.url);
            } finally {
              progress.stop();
            }
            summary(
              `imported ${result.stored} dicom instances, ${result.present} already there, ${result.skipped} skipped, ${result.failed} failed`,
            );
            if (result.failed > 0) process.exitCode = 1;
          }),
      ),
    "resource-store import-dicom ./export --datasource site-a",
    "resource-store import-dicom ./export --datasource site-a --access-level restricted --deidentify --deidentify-key-file key.txt",
  );

  example(
    program
      .command("watch")
      .description("print the change feed as NDJSON until interrupted, resuming after dropped connections")
      .option("--since <time>", "RFC 3339 instant to start after (default: from now on)")
      .option("--payload-type <type>", "only this payload type (repeatable)", collect, [])
      .option("--root <identifier>", "only this resource and its descendants")
      .option("--include-resources", "print each event's resource too", false)
      .action(
        async (
          opts: { since?: string; payloadType: string[]; root?: string; includeResources: boolean },
          cmd: Command,
        ) =>
          run(cmd, async (g) => {
            const abort = new AbortController();
            const stop = () => abort.abort();
            process.once("SIGINT", stop);
            process.once("SIGTERM", stop);
            const n = await runWatch(
              clientFor(g),
              {
                ...(opts.since !== undefined ? { since: opts.since } : {}),
                payloadTypes: opts.payloadType,
                ...(opts.root !== undefined ? { root: opts.root } : {}),
                includeResources: opts.includeResources,
              },
              abort.signal,
              (line) => process.stdout.write(line),
              g.url,
            );
            // On stderr: stdout is the events (`watch | jq`), as for history.
            if (!g.quiet) warn(`watched ${n} events`);
          }),
      ),
    "resource-store watch --payload-type study --since 2026-01-31T00:00:00Z",
  );

  program.addCommand(historyCommand());
  for (const make of OPERATOR_COMMANDS) program.addCommand(make());
  return program;
}
