// A logger whose lines a test reads: each JSON line the service writes,
// kept as a string in `lines` as it is written.
import { Writable } from "node:stream";
import type { Logger } from "pino";
import type { LogLevel } from "../../src/config.js";
import { createLogger } from "../../src/log.js";

export interface LogLines {
  readonly logger: Logger;
  readonly lines: string[];
  /** Every line so far, parsed. */
  records(): Record<string, unknown>[];
  /** The `call` lines so far, parsed, that match `where`. */
  calls(where: (record: Record<string, unknown>) => boolean): Record<string, unknown>[];
}

export function logLines(level: LogLevel, lines: string[] = []): LogLines {
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(
        ...chunk
          .toString()
          .split("\n")
          .filter((l) => l !== ""),
      );
      cb();
    },
  });
  const records = () => lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  return {
    logger: createLogger(level, sink),
    lines,
    records,
    calls: (where) => records().filter((r) => r.msg === "call" && where(r)),
  };
}
