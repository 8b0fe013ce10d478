// At most `max` parquet exports at once per process (docs/contract/16-limits.md):
// a further one waits up to `queueMs` for a slot, then fails with
// TOO_MANY_EXPORTS (429 over REST, resource_exhausted over gRPC/Connect).
import { tooManyExports } from "../errors.js";

export interface ExportGate {
  /** Resolves with a release function once a slot is free; rejects after the queue time. */
  acquire(signal?: AbortSignal): Promise<() => void>;
  /** Exports holding a slot now. */
  readonly running: number;
}

export function createExportGate(max: number, queueMs: number): ExportGate {
  let running = 0;
  const waiting: Array<() => void> = [];
  const releaser = () => {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = waiting.shift();
      if (next) next();
      else running--;
    };
  };
  return {
    get running() {
      return running;
    },
    acquire(signal) {
      if (running < max) {
        running++;
        return Promise.resolve(releaser());
      }
      return new Promise((resolve, reject) => {
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
        };
        // A freed slot passes straight to this waiter (running stays as it is).
        const grant = () => {
          done();
          resolve(releaser());
        };
        const leave = (err: Error) => {
          const at = waiting.indexOf(grant);
          if (at >= 0) waiting.splice(at, 1);
          done();
          reject(err);
        };
        const onAbort = () =>
          leave(signal?.reason instanceof Error ? signal.reason : new Error("export abandoned while queued"));
        const timer = setTimeout(() => leave(tooManyExports(max, queueMs)), queueMs);
        signal?.addEventListener("abort", onAbort, { once: true });
        waiting.push(grant);
      });
    },
  };
}
