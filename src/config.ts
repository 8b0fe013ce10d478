// One typed configuration, read once from the environment. Every default
// lives in DEFAULTS; an invalid value fails start-up with a message that
// names the variable.
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";

export type LogLevel = "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";

interface S3Config {
  /** Where the service reaches S3; unset = embedded s3rver under DATA_DIR. */
  readonly endpoint: string | undefined;
  /** The address written into presigned URLs; defaults to `endpoint`. */
  readonly publicEndpoint: string | undefined;
  readonly bucket: string;
  readonly region: string;
  readonly accessKeyId: string | undefined;
  readonly secretAccessKey: string | undefined;
  readonly forcePathStyle: boolean;
  readonly presignExpiresSeconds: number;
}

export interface LimitsConfig {
  /** Items in any batch (create, read, update, delete, restore, presign batch, upload-dir). */
  readonly maxBatchItems: number;
  /** Bytes in one request body. */
  readonly maxBodyBytes: number;
  /** The largest `limit` of a query page (and the page size without one). */
  readonly maxQueryLimit: number;
  /** The largest `limit` of a parquet preview. */
  readonly maxPreviewRows: number;
  /** Keys one /s3/list may answer; a larger listing asks for a narrower prefix. */
  readonly maxListKeys: number;
}

export interface AuthConfig {
  /** `token=scope,scope;token2=scope` (API_TOKENS). Secret: never log it. */
  readonly tokens: string | undefined;
  /** A file of such entries, one or more a line (API_TOKENS_FILE). */
  readonly tokensFile: string | undefined;
  /** OIDC issuer; set = JWTs from it are accepted. */
  readonly oidcIssuer: string | undefined;
  /** The `aud` a JWT must carry; unset = not checked. */
  readonly oidcAudience: string | undefined;
  /** JWKS location; unset = the issuer's discovery document's jwks_uri. */
  readonly oidcJwksUrl: string | undefined;
  /** The claim a JWT's grant strings are read from (OIDC_GRANTS_CLAIM); unset = `scope` and `scp`. */
  readonly oidcGrantsClaim?: string | undefined;
  /** Grant strings for a JWT axis that carries none (OIDC_DEFAULT_GRANTS); unset = none. Parsed by the authenticator. */
  readonly oidcDefaultGrants?: string | undefined;
  /** Whether a JWT without `exp` is accepted (OIDC_ALLOW_NO_EXP, default false). */
  readonly oidcAllowNoExp?: boolean;
  /** How long the last good JWKS is used while the provider cannot be reached (OIDC_JWKS_MAX_STALE_MS). */
  readonly oidcJwksMaxStaleMs?: number;
}

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly dataDir: string;
  /** PostgreSQL connection string; unset = embedded PGlite in DATA_DIR. */
  readonly databaseUrl: string | undefined;
  readonly databasePoolSize: number;
  /** Hot standbys for reads (DATABASE_READ_URLS and its two bounds; docs/scaling.md). */
  readonly readReplicas: ReadReplicasConfig;
  readonly logLevel: LogLevel;
  /**
   * The read audit (AUDIT_LOG, docs/contract/19-audit-history.md): "stdout",
   * or the path of a file the lines are appended to; unset = off.
   */
  readonly auditLog: string | undefined;
  /**
   * The registry's HMAC keys, the one hashing new rows first (REGISTRY_SECRET,
   * REGISTRY_SECRET_FILE, REGISTRY_SECRETS or REGISTRY_SECRETS_FILE); unset =
   * the embedded store generates one under DATA_DIR, and PostgreSQL refuses to start.
   */
  readonly registryKeys: readonly RegistryKeyConfig[] | undefined;
  /** Signing key for query cursors; unset = generated once and kept under DATA_DIR. */
  readonly cursorSecret: string | undefined;
  readonly s3: S3Config;
  readonly limits: LimitsConfig;
  readonly auth: AuthConfig;
  /** How long SIGTERM waits for in-flight calls before closing them. */
  readonly shutdownGraceMs: number;
  /** Encoder worker threads of the process's one pool, shared by every parquet export (PARQUET_ENCODER_WORKERS). */
  readonly parquetEncoderWorkers: number;
  /** The change feed (docs/contract/14-events.md). */
  readonly events: EventsConfig;
  // --- browsers (docs/contract/15-browsers.md) ---
  /** CORS_ORIGINS: the origins allowed to call from a browser, or "*"; unset = no CORS headers at all. */
  readonly corsOrigins: readonly string[] | "*" | undefined;
  /**
   * ALLOWED_HOSTS: names (lower case, a port optional) a request's Host may
   * carry besides localhost, 127.0.0.1 and [::1]. Unset: with authentication
   * off only those three are answered; with it on Host is not checked
   * (docs/contract/16-limits.md).
   */
  readonly allowedHosts: readonly string[] | undefined;
  /**
   * Tracing (docs/tracing.md): on when the OpenTelemetry SDK's own variables name an
   * OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
   * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and do not turn it off
   * (OTEL_SDK_DISABLED=true, OTEL_TRACES_EXPORTER=none). Every other
   * OTEL_* variable is the SDK's to read.
   */
  readonly tracing: boolean;
  readonly defence: DefenceConfig;
}

interface EventsConfig {
  /** A watch with nothing to send sends an empty message this often (EVENTS_HEARTBEAT_MS). */
  readonly heartbeatMs: number;
  /** Versions read per page of history; commits never split across pages (EVENTS_PAGE_SIZE). */
  readonly pageSize: number;
  /** Largest stream message; a larger commit is split into partial messages (EVENTS_MAX_MESSAGE_BYTES). */
  readonly maxMessageBytes: number;
  /** Open Watch / GET /events streams per process; more are refused with resource_exhausted (MAX_WATCH_STREAMS). */
  readonly maxStreams: number;
}

/** One registry key: an id recorded on the rows it hashed, and the key text (its UTF-8 bytes are the HMAC key). */
export interface RegistryKeyConfig {
  readonly id: string;
  readonly secret: string;
}

// --- Defence limits (docs/contract/16-limits.md) ---------------------------------
interface DefenceConfig {
  /** Request headers (and the first bytes that pick HTTP/1.1 or HTTP/2) must arrive within this. */
  readonly headersTimeoutMs: number;
  /** A request body must be complete within this (408 or closed). */
  readonly requestTimeoutMs: number;
  /** Idle keep-alive connections and HTTP/2 sessions are closed after this. */
  readonly idleTimeoutMs: number;
  /** Open connections at most; further ones are refused until others close. */
  readonly maxConnections: number;
  /** HTTP/2 streams one connection may have open at once (REFUSED_STREAM beyond). */
  readonly maxConcurrentStreams: number;
  /** Ancestors a resource may have (create, update, restore). */
  readonly maxTreeDepth: number;
  /** Children GET /children lists at most. */
  readonly maxChildren: number;
  /** Nested `any` groups in a filter. */
  readonly maxFilterDepth: number;
  /** Parquet exports running at once. */
  readonly maxConcurrentExports: number;
  /** How long an export beyond the cap waits for a slot before 429. */
  readonly exportQueueMs: number;
  /** An export whose client reads nothing for this long is ended. */
  readonly exportStallMs: number;
  /** Bytes of an object one parquet preview may read, footer included. */
  readonly maxPreviewBytes: number;
  /** statement_timeout of every PostgreSQL pool connection. */
  readonly databaseStatementTimeoutMs: number;
  /** idle_in_transaction_session_timeout of every PostgreSQL pool connection. */
  readonly databaseIdleInTransactionMs: number;
}

export const DEFENCE_DEFAULTS = {
  HEADERS_TIMEOUT_MS: 10_000,
  REQUEST_TIMEOUT_MS: 120_000,
  IDLE_TIMEOUT_MS: 65_000,
  MAX_CONNECTIONS: 10_000,
  MAX_CONCURRENT_STREAMS: 100,
  MAX_TREE_DEPTH: 64,
  MAX_CHILDREN: 10_000,
  MAX_FILTER_DEPTH: 8,
  MAX_CONCURRENT_EXPORTS: 4,
  EXPORT_QUEUE_MS: 10_000,
  EXPORT_STALL_MS: 60_000,
  MAX_PREVIEW_BYTES: 64 * 1024 * 1024,
  DATABASE_STATEMENT_TIMEOUT_MS: 300_000,
  DATABASE_IDLE_IN_TRANSACTION_MS: 120_000,
} as const;

function loadDefence(env: Env): DefenceConfig {
  const d = DEFENCE_DEFAULTS;
  const ms = (name: keyof typeof d, min = 1) => int(env, name, d[name], min, 24 * 3600 * 1000);
  return {
    headersTimeoutMs: ms("HEADERS_TIMEOUT_MS"),
    requestTimeoutMs: ms("REQUEST_TIMEOUT_MS"),
    idleTimeoutMs: ms("IDLE_TIMEOUT_MS"),
    maxConnections: int(env, "MAX_CONNECTIONS", d.MAX_CONNECTIONS, 1, 10_000_000),
    maxConcurrentStreams: int(env, "MAX_CONCURRENT_STREAMS", d.MAX_CONCURRENT_STREAMS, 1, 2 ** 31 - 1),
    maxTreeDepth: int(env, "MAX_TREE_DEPTH", d.MAX_TREE_DEPTH, 1, 100_000),
    maxChildren: int(env, "MAX_CHILDREN", d.MAX_CHILDREN, 1, 100_000_000),
    maxFilterDepth: int(env, "MAX_FILTER_DEPTH", d.MAX_FILTER_DEPTH, 1, 100),
    maxConcurrentExports: int(env, "MAX_CONCURRENT_EXPORTS", d.MAX_CONCURRENT_EXPORTS, 1, 10_000),
    exportQueueMs: ms("EXPORT_QUEUE_MS", 0),
    exportStallMs: ms("EXPORT_STALL_MS"),
    maxPreviewBytes: int(env, "MAX_PREVIEW_BYTES", d.MAX_PREVIEW_BYTES, 1024, Number.MAX_SAFE_INTEGER),
    databaseStatementTimeoutMs: ms("DATABASE_STATEMENT_TIMEOUT_MS"),
    databaseIdleInTransactionMs: ms("DATABASE_IDLE_IN_TRANSACTION_MS"),
  };
}

/** With OIDC_ISSUER, OIDC_AUDIENCE is required (docs/contract/16-limits.md): a token minted for another service must not pass. */
function checkOidc(auth: AuthConfig): AuthConfig {
  if (auth.oidcIssuer !== undefined && auth.oidcAudience === undefined) {
    throw new ConfigError("OIDC_AUDIENCE", "is required when OIDC_ISSUER is set");
  }
  return auth;
}
// --- end of defence limits -----------------------------------------------

export const DEFAULTS = {
  PORT: 8080,
  HOST: "127.0.0.1",
  DATA_DIR: "./data",
  DATABASE_POOL_SIZE: 10,
  DATABASE_READ_TIMEOUT_MS: 1000,
  DATABASE_READ_STAMP_TTL_MS: 100,
  LOG_LEVEL: "info" as LogLevel,
  S3_BUCKET: "resources",
  S3_REGION: "us-east-1",
  PRESIGN_EXPIRES_SECONDS: 3600,
  MAX_BATCH_ITEMS: 10_000,
  MAX_BODY_BYTES: 64 * 1024 * 1024,
  MAX_QUERY_LIMIT: 10_000,
  MAX_PREVIEW_ROWS: 10_000,
  MAX_LIST_KEYS: 100_000,
  SHUTDOWN_GRACE_MS: 10_000,
  EVENTS_HEARTBEAT_MS: 15_000,
  EVENTS_PAGE_SIZE: 1000,
  EVENTS_MAX_MESSAGE_BYTES: 1_048_576,
  MAX_WATCH_STREAMS: 1000,
  OIDC_JWKS_MAX_STALE_MS: 24 * 3_600_000,
} as const;

/** PARQUET_ENCODER_WORKERS unset: two workers, or one on a single core. */
export function defaultEncoderWorkers(): number {
  return Math.min(2, availableParallelism());
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    detail: string,
  ) {
    super(`invalid configuration: ${variable} ${detail}`);
    this.name = "ConfigError";
  }
}

type Env = Readonly<Record<string, string | undefined>>;

function str(env: Env, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === "" ? undefined : v.trim();
}

function int(env: Env, name: string, dflt: number, min: number, max: number): number {
  const raw = str(env, name);
  if (raw === undefined) return dflt;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be a whole number, got ${JSON.stringify(raw)}`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${n}`);
  return n;
}

function bool(env: Env, name: string, dflt: boolean): boolean {
  const raw = str(env, name);
  if (raw === undefined) return dflt;
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  throw new ConfigError(name, `must be true or false, got ${JSON.stringify(raw)}`);
}

/**
 * ALLOWED_HOSTS: comma-separated host names, each optionally with :port
 * (`api.example.org`, `10.0.0.5:8080`, `[fd00::1]`). A name without a port
 * matches any port. No wildcard: the point is to name the hosts a browser
 * may have been sent to, and "any" would undo the rebinding check.
 */
function hostNames(env: Env, name: string): readonly string[] | undefined {
  const raw = str(env, name);
  if (raw === undefined) return undefined;
  const list: string[] = [];
  for (const entry of raw.split(",").map((e) => e.trim().toLowerCase())) {
    if (entry === "") continue;
    if (
      !/^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\])(?::\d{1,5})?$/.test(
        entry,
      )
    ) {
      throw new ConfigError(
        name,
        `must hold host names such as api.example.org or 10.0.0.5:8080, got ${JSON.stringify(entry)}`,
      );
    }
    list.push(entry);
  }
  if (list.length === 0) throw new ConfigError(name, "must name at least one host (or be unset)");
  return list;
}

/** CORS_ORIGINS: "*" or comma-separated origins (scheme://host[:port], no path). */
function origins(env: Env, name: string): readonly string[] | "*" | undefined {
  const raw = str(env, name);
  if (raw === undefined) return undefined;
  if (raw === "*") return "*";
  const list: string[] = [];
  for (const entry of raw.split(",").map((e) => e.trim())) {
    if (entry === "") continue;
    if (entry === "*") throw new ConfigError(name, 'must be "*" alone or a list of origins, not a list holding "*"');
    let origin: string;
    try {
      const parsed = new URL(entry);
      if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new Error("scheme");
      origin = parsed.origin;
    } catch {
      throw new ConfigError(name, `must hold origins such as https://example.org, got ${JSON.stringify(entry)}`);
    }
    if (origin !== entry.replace(/\/$/, "").toLowerCase() && origin !== entry.replace(/\/$/, "")) {
      throw new ConfigError(
        name,
        `must hold origins only (scheme://host[:port], no path), got ${JSON.stringify(entry)}`,
      );
    }
    list.push(origin);
  }
  if (list.length === 0) throw new ConfigError(name, "must name at least one origin (or be unset)");
  return list;
}

function url(env: Env, name: string, protocols: readonly string[]): string | undefined {
  const raw = str(env, name);
  if (raw === undefined) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new ConfigError(name, "must be a URL");
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(name, `must be a ${protocols.join(" or ")} URL`);
  }
  return raw;
}

const LOG_LEVELS: readonly LogLevel[] = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

export function loadConfig(env: Env = process.env): Config {
  const logLevel = (str(env, "LOG_LEVEL") ?? DEFAULTS.LOG_LEVEL).toLowerCase();
  if (!LOG_LEVELS.includes(logLevel as LogLevel)) {
    throw new ConfigError("LOG_LEVEL", `must be one of ${LOG_LEVELS.join(", ")}, got ${JSON.stringify(logLevel)}`);
  }
  const bucket = str(env, "S3_BUCKET") ?? DEFAULTS.S3_BUCKET;
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket)) {
    throw new ConfigError("S3_BUCKET", "must be a valid S3 bucket name");
  }
  const host = str(env, "HOST") ?? DEFAULTS.HOST;
  return {
    port: int(env, "PORT", DEFAULTS.PORT, 0, 65535),
    host,
    dataDir: str(env, "DATA_DIR") ?? DEFAULTS.DATA_DIR,
    databaseUrl: url(env, "DATABASE_URL", ["postgres:", "postgresql:"]),
    databasePoolSize: int(env, "DATABASE_POOL_SIZE", DEFAULTS.DATABASE_POOL_SIZE, 1, 1000),
    readReplicas: readReplicas(env),
    logLevel: logLevel as LogLevel,
    auditLog: str(env, "AUDIT_LOG"),
    registryKeys: registryKeys(env),
    cursorSecret: str(env, "CURSOR_SECRET"),
    s3: {
      endpoint: url(env, "S3_ENDPOINT", ["http:", "https:"]),
      publicEndpoint: url(env, "S3_PUBLIC_ENDPOINT", ["http:", "https:"]),
      bucket,
      region: str(env, "S3_REGION") ?? DEFAULTS.S3_REGION,
      accessKeyId: str(env, "S3_ACCESS_KEY_ID"),
      secretAccessKey: str(env, "S3_SECRET_ACCESS_KEY"),
      forcePathStyle: bool(env, "S3_FORCE_PATH_STYLE", true),
      presignExpiresSeconds: int(env, "PRESIGN_EXPIRES_SECONDS", DEFAULTS.PRESIGN_EXPIRES_SECONDS, 1, 7 * 24 * 3600),
    },
    limits: {
      maxBatchItems: int(env, "MAX_BATCH_ITEMS", DEFAULTS.MAX_BATCH_ITEMS, 1, 1_000_000),
      maxBodyBytes: int(env, "MAX_BODY_BYTES", DEFAULTS.MAX_BODY_BYTES, 1024, 1024 * 1024 * 1024),
      maxQueryLimit: int(env, "MAX_QUERY_LIMIT", DEFAULTS.MAX_QUERY_LIMIT, 1, 1_000_000),
      maxPreviewRows: int(env, "MAX_PREVIEW_ROWS", DEFAULTS.MAX_PREVIEW_ROWS, 1, 1_000_000),
      maxListKeys: int(env, "MAX_LIST_KEYS", DEFAULTS.MAX_LIST_KEYS, 1, 100_000_000),
    },
    auth: checkOidc({
      tokens: str(env, "API_TOKENS"),
      tokensFile: str(env, "API_TOKENS_FILE"),
      oidcIssuer: url(env, "OIDC_ISSUER", ["http:", "https:"]),
      oidcAudience: str(env, "OIDC_AUDIENCE"),
      oidcJwksUrl: url(env, "OIDC_JWKS_URL", ["http:", "https:"]),
      oidcGrantsClaim: str(env, "OIDC_GRANTS_CLAIM"),
      oidcDefaultGrants: str(env, "OIDC_DEFAULT_GRANTS"),
      oidcAllowNoExp: bool(env, "OIDC_ALLOW_NO_EXP", false),
      oidcJwksMaxStaleMs: int(env, "OIDC_JWKS_MAX_STALE_MS", DEFAULTS.OIDC_JWKS_MAX_STALE_MS, 0, 30 * 24 * 3_600_000),
    }),
    shutdownGraceMs: int(env, "SHUTDOWN_GRACE_MS", DEFAULTS.SHUTDOWN_GRACE_MS, 0, 600_000),
    parquetEncoderWorkers: int(env, "PARQUET_ENCODER_WORKERS", defaultEncoderWorkers(), 1, 256),
    events: {
      heartbeatMs: int(env, "EVENTS_HEARTBEAT_MS", DEFAULTS.EVENTS_HEARTBEAT_MS, 10, 3_600_000),
      pageSize: int(env, "EVENTS_PAGE_SIZE", DEFAULTS.EVENTS_PAGE_SIZE, 1, 100_000),
      maxMessageBytes: int(
        env,
        "EVENTS_MAX_MESSAGE_BYTES",
        DEFAULTS.EVENTS_MAX_MESSAGE_BYTES,
        1024,
        1024 * 1024 * 1024,
      ),
      maxStreams: int(env, "MAX_WATCH_STREAMS", DEFAULTS.MAX_WATCH_STREAMS, 1, 1_000_000),
    },
    // --- browsers (docs/contract/15-browsers.md) ---
    corsOrigins: origins(env, "CORS_ORIGINS"),
    allowedHosts: hostNames(env, "ALLOWED_HOSTS"),
    tracing: tracingConfigured(env),
    defence: loadDefence(env),
  };
}

// --- tracing (docs/tracing.md) ------------------------------------------------
function tracingConfigured(env: Env): boolean {
  if ((str(env, "OTEL_SDK_DISABLED") ?? "").toLowerCase() === "true") return false;
  if ((str(env, "OTEL_TRACES_EXPORTER") ?? "").toLowerCase() === "none") return false;
  return (
    str(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") !== undefined ||
    str(env, "OTEL_EXPORTER_OTLP_ENDPOINT") !== undefined
  );
}

// --- registry keys (docs/contract/06-registry.md) --------------------------
// Two variables, each with a _FILE twin that holds exactly what the variable
// would (the usual convention for mounted secrets), so a value never changes
// meaning with where it is kept:
// - REGISTRY_SECRET / REGISTRY_SECRET_FILE: one key, taken whole (a ":" or ","
//   in it is part of the key), recorded under the id "default".
// - REGISTRY_SECRETS / REGISTRY_SECRETS_FILE: a list of `id:key`, the first
//   hashing new rows.
// A single key is one line: a line break in one is refused rather than read
// as a list, which is what an earlier version made of REGISTRY_SECRET_FILE.
/** The id of a key given alone (REGISTRY_SECRET, its file, the generated key, the key moved out of the database). */
export const DEFAULT_REGISTRY_KEY_ID = "default";
const KEY_ID = /^[A-Za-z0-9_-]{1,64}$/;
const REGISTRY_KEY_VARIABLES = [
  "REGISTRY_SECRET",
  "REGISTRY_SECRET_FILE",
  "REGISTRY_SECRETS",
  "REGISTRY_SECRETS_FILE",
] as const;

/**
 * The REGISTRY_SECRETS format: `id:key,id:key,...`, the first hashing new
 * rows (commas or newlines between entries, `#` starts a comment line; a key
 * may contain ":" but not "," or a newline). Only the first key's place
 * means anything: reordering the others changes no stored hash.
 */
export function parseRegistryKeys(text: string, variable: string): RegistryKeyConfig[] {
  const entries = text
    .split(/[,\n]/)
    .map((e) => e.trim())
    .filter((e) => e !== "" && !e.startsWith("#"));
  if (entries.length === 0) throw new ConfigError(variable, "holds no key");
  const keys = entries.map((entry, i) => {
    const colon = entry.indexOf(":");
    const id = colon < 0 ? "" : entry.slice(0, colon).trim();
    const secret = colon < 0 ? "" : entry.slice(colon + 1).trim();
    // Never quote the entry: it is a secret.
    if (!KEY_ID.test(id) || secret === "") {
      throw new ConfigError(variable, `entry ${i + 1} is not id:key (id: letters, digits, _ or -, at most 64)`);
    }
    return { id, secret };
  });
  const ids = new Set<string>();
  for (const k of keys) {
    if (ids.has(k.id)) throw new ConfigError(variable, `lists key id ${k.id} twice`);
    ids.add(k.id);
  }
  return keys;
}

/** The REGISTRY_SECRET format: the whole text is one key, id "default". */
function singleRegistryKey(text: string, variable: string): RegistryKeyConfig[] {
  const secret = text.trim();
  if (secret === "") throw new ConfigError(variable, "is empty");
  if (/[\r\n]/.test(secret)) {
    const list = variable.endsWith("_FILE") ? "REGISTRY_SECRETS_FILE" : "REGISTRY_SECRETS";
    throw new ConfigError(
      variable,
      `holds more than one line: it takes one key, taken whole; a list of id:key goes in ${list}`,
    );
  }
  return [{ id: DEFAULT_REGISTRY_KEY_ID, secret }];
}

function readKeyFile(variable: string, file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (err) {
    throw new ConfigError(variable, `cannot be read (${(err as NodeJS.ErrnoException).code ?? "error"})`);
  }
}

function registryKeys(env: Env): RegistryKeyConfig[] | undefined {
  const names = REGISTRY_KEY_VARIABLES.filter((n) => str(env, n) !== undefined);
  if (names.length > 1)
    throw new ConfigError(names[1] as string, `cannot be set together with ${names[0] as string}; set one`);
  const [name] = names;
  if (name === undefined) return undefined;
  const value = str(env, name) as string;
  switch (name) {
    case "REGISTRY_SECRET":
      return singleRegistryKey(value, name);
    case "REGISTRY_SECRET_FILE":
      return singleRegistryKey(readKeyFile(name, value), name);
    case "REGISTRY_SECRETS":
      return parseRegistryKeys(value, name);
    case "REGISTRY_SECRETS_FILE":
      return parseRegistryKeys(readKeyFile(name, value), name);
  }
}

// --- read standbys (docs/scaling.md) ---------------------------------------
interface ReadReplicasConfig {
  /** PostgreSQL hot standbys of DATABASE_URL, in order of preference; empty = every read on the primary. */
  readonly urls: readonly string[];
  /** Longest wait for a standby's connection or its replayed clock before it is skipped. */
  readonly timeoutMs: number;
  /** How long a standby's replayed clock stamp is trusted before it is asked again. */
  readonly stampTtlMs: number;
}

function readReplicas(env: Env): ReadReplicasConfig {
  const name = "DATABASE_READ_URLS";
  const raw = str(env, name);
  const urls = (raw ?? "")
    .split(",")
    .map((u) => u.trim())
    .filter((u) => u !== "");
  urls.forEach((u, i) => {
    let parsed: URL;
    try {
      parsed = new URL(u);
    } catch {
      // Never quote the entry: it may carry a password.
      throw new ConfigError(name, `entry ${i + 1} is not a URL`);
    }
    if (parsed.protocol !== "postgres:" && parsed.protocol !== "postgresql:") {
      throw new ConfigError(name, `entry ${i + 1} must be a postgres: or postgresql: URL`);
    }
  });
  if (urls.length > 0 && str(env, "DATABASE_URL") === undefined) {
    throw new ConfigError(name, "needs DATABASE_URL (the primary): standbys serve reads of a PostgreSQL store");
  }
  return {
    urls,
    timeoutMs: int(env, "DATABASE_READ_TIMEOUT_MS", DEFAULTS.DATABASE_READ_TIMEOUT_MS, 1, 60_000),
    stampTtlMs: int(env, "DATABASE_READ_STAMP_TTL_MS", DEFAULTS.DATABASE_READ_STAMP_TTL_MS, 0, 60_000),
  };
}
