// What every sub-command shares: the global options, the client built from
// them, one way to say what went wrong, and the failure that ends a command
// with a non-zero exit after its summary line.
import { Code, ConnectError } from "@connectrpc/connect";
import { createResourceStoreClient, type ResourceStoreClient, type TransportKind } from "../client/index.js";

export const DEFAULT_URL = "http://127.0.0.1:8080";

export interface GlobalOptions {
  readonly url: string;
  readonly token?: string;
  readonly asOf?: string;
  readonly quiet: boolean;
}

/** The global options after the environment defaults (API.md section 17). */
export function resolveGlobals(raw: { url?: string; token?: string; asOf?: string; quiet?: boolean }, env = process.env): GlobalOptions {
  const url = raw.url ?? env.RESOURCE_STORE_URL ?? DEFAULT_URL;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new CliError(`--url ${JSON.stringify(url)} is not a URL (e.g. ${DEFAULT_URL})`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new CliError(`--url must be http:// or https://, got ${url}`);
  const token = raw.token ?? (env.RESOURCE_STORE_TOKEN !== undefined && env.RESOURCE_STORE_TOKEN !== "" ? env.RESOURCE_STORE_TOKEN : undefined);
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
export function clientFor(g: GlobalOptions, opts: { withAsOf?: boolean; transport?: TransportKind } = {}): ResourceStoreClient {
  return createResourceStoreClient({
    baseUrl: g.url,
    transport: opts.transport ?? "grpc",
    ...(g.token !== undefined ? { token: g.token } : {}),
    ...(opts.withAsOf === true && g.asOf !== undefined ? { asOf: g.asOf } : {}),
  });
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
      return `${code}: ${err.rawMessage} (give a token with --token or RESOURCE_STORE_TOKEN)`;
    }
    if (err.code === Code.Unavailable && NETWORK.test(`${err.rawMessage} ${err.cause instanceof Error ? err.cause.message : ""}`)) {
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

