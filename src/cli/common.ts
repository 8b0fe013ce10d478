// What every sub-command shares: the global options, the client built from
// them, one way to say what went wrong, and the failure that ends a command
// with a non-zero exit after its summary line.
import { readFileSync } from "node:fs";
import { Code, ConnectError } from "@connectrpc/connect";
import { createResourceStoreClient, type ResourceStoreClient, type TransportKind } from "../client/index.js";

const DEFAULT_URL = "http://127.0.0.1:8080";

export interface GlobalOptions {
  readonly url: string;
  readonly token?: string;
  readonly asOf?: string;
  readonly quiet: boolean;
}

export interface RawGlobals {
  url?: string;
  token?: string;
  tokenFile?: string;
  asOf?: string;
  quiet?: boolean;
}

const TOKEN_ON_COMMAND_LINE_WARNING =
  "warning: --token puts the token on the command line, where other users of this machine can read it (ps, /proc); use --token-file FILE or $RESOURCE_STORE_TOKEN";

/**
 * The bearer token: `--token-file FILE` (its first line, trimmed), else
 * `--token`, else `$RESOURCE_STORE_TOKEN`. An option on the command line is
 * the caller's choice for this run, so it wins over the environment; the two
 * options together are refused rather than one silently ignored. `--token`
 * warns: every local user can read a process's arguments.
 */
function resolveToken(raw: RawGlobals, env: NodeJS.ProcessEnv, onWarning: (line: string) => void): string | undefined {
  if (raw.tokenFile !== undefined && raw.token !== undefined)
    throw new CliError("give the token once: --token-file or --token, not both", 2);
  if (raw.tokenFile !== undefined) {
    let text: string;
    try {
      text = readFileSync(raw.tokenFile, "utf8");
    } catch (err) {
      throw new CliError(`--token-file ${raw.tokenFile}: ${err instanceof Error ? err.message : String(err)}`, 2);
    }
    const token = (text.split(/\r?\n/, 1)[0] ?? "").trim();
    if (token === "") throw new CliError(`--token-file ${raw.tokenFile}: the first line is empty`, 2);
    return token;
  }
  if (raw.token !== undefined) {
    onWarning(TOKEN_ON_COMMAND_LINE_WARNING);
    return raw.token;
  }
  const fromEnv = env.RESOURCE_STORE_TOKEN?.trim();
  return fromEnv !== undefined && fromEnv !== "" ? fromEnv : undefined;
}

/** The global options after the environment defaults (docs/contract/17-command-line.md). */
export function resolveGlobals(
  raw: RawGlobals,
  env = process.env,
  onWarning: (line: string) => void = warn,
): GlobalOptions {
  const url = raw.url ?? env.RESOURCE_STORE_URL ?? DEFAULT_URL;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new CliError(`--url ${JSON.stringify(url)} is not a URL (e.g. ${DEFAULT_URL})`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    throw new CliError(`--url must be http:// or https://, got ${url}`);
  const token = resolveToken(raw, env, onWarning);
  if (raw.asOf !== undefined && Number.isNaN(Date.parse(raw.asOf))) {
    throw new CliError(`--as-of ${JSON.stringify(raw.asOf)} is not an RFC 3339 timestamp (e.g. 2026-01-31T12:00:00Z)`);
  }
  return { url: url.replace(/\/+$/, ""), token, asOf: raw.asOf, quiet: raw.quiet === true };
}

/**
 * The project's client. Writes go over gRPC (binary protobuf on HTTP/2, the
 * fastest surface for big batches); `withAsOf` adds the global --as-of to
 * every read.
 */
export function clientFor(
  g: GlobalOptions,
  opts: { withAsOf?: boolean; transport?: TransportKind } = {},
): ResourceStoreClient {
  return createResourceStoreClient({
    baseUrl: g.url,
    transport: opts.transport ?? "grpc",
    ...(g.token !== undefined ? { token: g.token } : {}),
    ...(opts.withAsOf === true && g.asOf !== undefined ? { asOf: g.asOf } : {}),
  });
}

/** Identifiers a look-up sends at once: the request stays small whatever --batch-size is. */
const LOOKUP_IDENTIFIERS = 10_000;

/**
 * Which of `identifiers` are active. The query sets no `limit`: the service
 * then pages by its own MAX_QUERY_LIMIT (docs/contract/04-query.md), which this side
 * cannot know, and the pages are followed by cursor. Asking `limit` = the
 * number of identifiers is refused by a service configured with a smaller
 * MAX_QUERY_LIMIT.
 */
export async function activeAmong(client: ResourceStoreClient, identifiers: readonly string[]): Promise<Set<string>> {
  const active = new Set<string>();
  for (let i = 0; i < identifiers.length; i += LOOKUP_IDENTIFIERS) {
    const chunk = identifiers.slice(i, i + LOOKUP_IDENTIFIERS);
    let cursor: string | undefined;
    do {
      const page = await client.query.query({
        identifiers: chunk,
        selectColumns: ["identifier"],
        sortBy: "identifier",
        sortOrder: "asc",
        ...(cursor !== undefined ? { cursor } : {}),
      });
      for (const r of page.results) active.add(r.identifier);
      cursor = page.nextCursor;
    } while (cursor !== undefined && cursor !== "");
  }
  return active;
}

/** A failure the command reports as it is (no stack) and exits non-zero for. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
    this.name = "CliError";
  }
}

const NETWORK = /ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ECONNRESET|ETIMEDOUT|EAI_AGAIN|fetch failed|socket hang up/i;

/** One line saying what the service (or the network) answered. */
export function describeError(err: unknown, url?: string): string {
  if (err instanceof CliError) return err.message;
  if (err instanceof ConnectError) {
    const code = Code[err.code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
    if (err.code === Code.Unauthenticated) {
      return `${code}: ${err.rawMessage} (give a token with --token-file FILE or $RESOURCE_STORE_TOKEN)`;
    }
    if (
      err.code === Code.Unavailable &&
      NETWORK.test(`${err.rawMessage} ${err.cause instanceof Error ? err.cause.message : ""}`)
    ) {
      return `cannot reach the service${url !== undefined ? ` at ${url}` : ""}: ${err.rawMessage}`;
    }
    return `${code}: ${err.rawMessage}`;
  }
  if (err instanceof Error) {
    const cause = (err as { cause?: unknown }).cause;
    const text = `${err.message}${cause instanceof Error ? `: ${cause.message}` : ""}`;
    if (url !== undefined && NETWORK.test(text)) return `cannot reach the service at ${url}: ${text}`;
    return text;
  }
  return String(err);
}

/** Writes the one summary line of a command to stdout. */
export function summary(line: string): void {
  process.stdout.write(`${line}\n`);
}

export function warn(line: string): void {
  process.stderr.write(`${line}\n`);
}
