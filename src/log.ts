// Structured JSON logs. Payloads, external uids and credentials are never
// logged: only routes, codes, durations and request ids. Errors keep their
// type, code and stack but not the extra fields that drivers attach (pg's
// `detail` and `where` can quote stored values).
import { pino, stdSerializers, type DestinationStream, type Logger } from "pino";
import type { LogLevel } from "./config.js";

export type { Logger };

function errSerializer(err: unknown): unknown {
  if (!(err instanceof Error)) return err;
  const full = stdSerializers.err(err);
  const code = (err as { code?: unknown }).code;
  const cause = (err as { cause?: unknown }).cause;
  return {
    type: full.type,
    message: full.message,
    stack: full.stack,
    ...(typeof code === "string" ? { code } : {}),
    ...(cause instanceof Error ? { cause: errSerializer(cause) } : {}),
  };
}

const CENSOR = "[redacted]";

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null;
}

/**
 * A copy of `v` (same prototype, every own property's current value) with one
 * property replaced. Values are read, not descriptors copied: on Node 24 an
 * Error's `stack` is an own accessor that answers only for the error itself.
 */
function withProperty(v: object, key: string, value: unknown): Record<string, unknown> {
  const copy = Object.create(Object.getPrototypeOf(v) as object | null) as Record<PropertyKey, unknown>;
  for (const k of Reflect.ownKeys(v)) {
    const enumerable = Object.getOwnPropertyDescriptor(v, k)?.enumerable ?? true;
    Object.defineProperty(copy, k, {
      value: (v as Record<PropertyKey, unknown>)[k],
      enumerable,
      writable: true,
      configurable: true,
    });
  }
  Object.defineProperty(copy, key, { value, enumerable: true, writable: true, configurable: true });
  return copy;
}

/**
 * Belt and braces: should a header object ever be logged, credentials are
 * not. A log object's `authorization`, any top-level value's
 * `authorization` (`headers.authorization`, ...) and `req.headers.authorization`
 * are censored in a copy; the caller's objects are left as they were.
 * pino's `redact` with the same paths cost about 10 us a line (docs/benchmarks/load.md,
 * "Round five: the log line"); this is one pass over the line's top-level keys.
 */
function censorCredentials(obj: Record<string, unknown>): Record<string, unknown> {
  let out: Record<string, unknown> | undefined;
  for (const key of Object.keys(obj)) {
    const v = obj[key];
    if (key === "authorization") {
      (out ??= { ...obj })[key] = CENSOR;
      continue;
    }
    if (!isObject(v)) continue;
    let censored: Record<string, unknown> | undefined;
    if (Object.prototype.hasOwnProperty.call(v, "authorization")) censored = withProperty(v, "authorization", CENSOR);
    const headers = key === "req" ? v.headers : undefined;
    if (isObject(headers) && Object.prototype.hasOwnProperty.call(headers, "authorization")) {
      censored = withProperty(censored ?? v, "headers", withProperty(headers, "authorization", CENSOR));
    }
    if (censored !== undefined) (out ??= { ...obj })[key] = censored;
  }
  return out ?? obj;
}

/** `destination` defaults to stdout; tests pass a stream to read the log. */
export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { service: "resource-store" },
    serializers: { err: errSerializer },
    formatters: { log: censorCredentials },
  };
  return destination === undefined ? pino(options) : pino(options, destination);
}
