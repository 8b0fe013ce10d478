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

/** `destination` defaults to stdout; tests pass a stream to read the log. */
export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { service: "resource-store" },
    serializers: { err: errSerializer },
    // Belt and braces: should a header object ever be logged, credentials are not.
    redact: { paths: ["authorization", "*.authorization", "headers.authorization", "req.headers.authorization"], censor: "[redacted]" },
  };
  return destination === undefined ? pino(options) : pino(options, destination);
}
