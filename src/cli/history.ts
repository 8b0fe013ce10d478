// `resource-store history ID`: every version of one resource
// (docs/contract/19-audit-history.md) as NDJSON, oldest first, one version a
// line {version, at, actor, kind, resource} (the resource flat, as REST
// writes it); the summary line `versions N` goes to stderr (stdout is the
// data: `history ID | jq` must see NDJSON alone), and not at all with -q.
import { Command, InvalidArgumentError } from "commander";
import type { ResourceVersion } from "../../gen/resourcestore/type/v1/resource_pb.js";
import type { HistoryParams, ResourceStoreClient } from "../client/index.js";
import { resourceToFlat } from "../schema/flat-codec.js";
import { CliError, clientFor, describeError, resolveGlobals, warn } from "./common.js";

/** One NDJSON line for a version. */
function versionLine(v: ResourceVersion): string {
  return `${JSON.stringify({
    version: Number(v.version),
    at: v.at,
    actor: v.actor,
    kind: v.kind,
    ...(v.resource !== undefined ? { resource: resourceToFlat(v.resource, { children: false }) } : {}),
  })}\n`;
}

/** Prints every version of `identifier`; returns how many. */
async function runHistory(
  client: Pick<ResourceStoreClient, "history">,
  identifier: string,
  params: HistoryParams,
  write: (line: string) => void,
): Promise<number> {
  let n = 0;
  for await (const page of client.history(identifier, params)) {
    for (const v of page.versions) {
      write(versionLine(v));
      n++;
    }
  }
  return n;
}

function pageSize(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1) throw new InvalidArgumentError("must be a positive integer.");
  return Number(value);
}

export function historyCommand(): Command {
  return new Command("history")
    .description("print every version of one resource as NDJSON (version, at, actor, kind, resource), oldest first")
    .argument("<identifier>", "the resource")
    .option("--since <time>", "RFC 3339: only versions committed at or after it")
    .option("--until <time>", "RFC 3339: only versions committed before it")
    .option("--page-size <n>", "versions per request (default: the server's, 100)", pageSize)
    .addHelpText("after", "\nExample:\n  $ resource-store history study-17 --since 2026-01-01T00:00:00Z\n")
    .action(async (identifier: string, opts: { since?: string; until?: string; pageSize?: number }, cmd: Command) => {
      let url: string | undefined;
      try {
        const g = resolveGlobals(
          cmd.optsWithGlobals<{ url?: string; token?: string; asOf?: string; quiet?: boolean }>(),
        );
        url = g.url;
        const n = await runHistory(
          clientFor(g),
          identifier,
          {
            ...(opts.since !== undefined ? { since: opts.since } : {}),
            ...(opts.until !== undefined ? { until: opts.until } : {}),
            ...(opts.pageSize !== undefined ? { limit: opts.pageSize } : {}),
          },
          (line) => process.stdout.write(line),
        );
        if (!g.quiet) warn(`versions ${n}`);
      } catch (err) {
        warn(`error: ${describeError(err, url)}`);
        process.exitCode = err instanceof CliError ? err.exitCode : 1;
      }
    });
}
