// Structured JSON logs. Payloads and external uids are never logged: only
// routes, codes, durations and request ids.
import { pino, type Logger } from "pino";
import type { LogLevel } from "./config.js";

export type { Logger };

export function createLogger(level: LogLevel): Logger {
  return pino({ level, base: { service: "resource-store" } });
}
