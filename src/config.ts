// One typed configuration, read once from the environment. Every default
// lives in DEFAULTS; an invalid value fails start-up with a message that
// names the variable.

export type LogLevel = "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";

export interface S3Config {
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
}

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly dataDir: string;
  /** PostgreSQL connection string; unset = embedded PGlite in DATA_DIR. */
  readonly databaseUrl: string | undefined;
  readonly databasePoolSize: number;
  readonly logLevel: LogLevel;
  /** HMAC key for external uids; unset = generated once and kept under DATA_DIR. */
  readonly registrySecret: string | undefined;
  /** Signing key for query cursors; unset = generated once and kept under DATA_DIR. */
  readonly cursorSecret: string | undefined;
  readonly s3: S3Config;
  readonly limits: LimitsConfig;
  readonly auth: AuthConfig;
  /** How long SIGTERM waits for in-flight calls before closing them. */
  readonly shutdownGraceMs: number;
}

export const DEFAULTS = {
  PORT: 8080,
  HOST: "127.0.0.1",
  DATA_DIR: "./data",
  DATABASE_POOL_SIZE: 10,
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
} as const;

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
    logLevel: logLevel as LogLevel,
    registrySecret: str(env, "REGISTRY_SECRET"),
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
    auth: {
      tokens: str(env, "API_TOKENS"),
      tokensFile: str(env, "API_TOKENS_FILE"),
      oidcIssuer: url(env, "OIDC_ISSUER", ["http:", "https:"]),
      oidcAudience: str(env, "OIDC_AUDIENCE"),
      oidcJwksUrl: url(env, "OIDC_JWKS_URL", ["http:", "https:"]),
    },
    shutdownGraceMs: int(env, "SHUTDOWN_GRACE_MS", DEFAULTS.SHUTDOWN_GRACE_MS, 0, 600_000),
  };
}
