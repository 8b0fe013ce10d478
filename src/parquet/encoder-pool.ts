// One pool of parquet encoder worker threads for the whole process
// (PARQUET_ENCODER_WORKERS): parquet-wasm's encoding of a row group blocks
// for tens of milliseconds, which the event loop must not, and a worker per
// export would let concurrent exports start any number of threads. A job is
// one row group's rows, as binary COPY tuples that the worker builds into
// Arrow itself (copy-batch.ts) or as Arrow IPC streams; its result is a small,
// complete parquet file, which export.ts stitches into the export's file.
// The threads run encoder-worker.ts.
// Workers start when a job needs one, never more than the cap; jobs beyond
// the idle workers wait in a FIFO queue (bounded by the callers: each export
// keeps at most `size` jobs in flight, and exports are capped). A worker
// that dies fails its one job and is replaced by the next job that needs it.
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import type { WireColumn } from "./copy-batch.js";
import type { EncoderOptions, WorkerReply, WorkerRequest } from "./encoder-protocol.js";

export type { EncoderOptions };

export interface EncodeJob {
  readonly options: EncoderOptions;
  /** Arrow IPC streams of one schema, in row order; transferred to the worker (unusable afterwards). */
  readonly batches?: readonly Uint8Array[];
  /**
   * Or the rows as binary COPY tuples, which the worker turns into Arrow
   * itself (copy-batch.ts); `data` is transferred.
   */
  readonly copy?: { readonly data: Uint8Array; readonly rows: number; readonly columns: readonly WireColumn[] };
  /**
   * Handed the whole buffer of `copy.data` back (transferred again) as soon
   * as the worker has read its rows, before the job ends; not called when
   * the worker fails first.
   */
  readonly giveBack?: (buffer: Uint8Array) => void;
}

interface EncoderPoolStats {
  /** The cap. */
  readonly size: number;
  /** Worker threads alive now. */
  readonly threads: number;
  /** The most threads alive at once since the pool was made. */
  readonly peakThreads: number;
  /** Threads started since the pool was made (replacements included). */
  readonly started: number;
  /** Jobs waiting for a worker. */
  readonly queued: number;
  /** Jobs being encoded now. */
  readonly busy: number;
  /** WebAssembly memory of the live workers, as of each one's last job (it never shrinks). */
  readonly wasmBytes: number;
}

export interface EncoderPool {
  readonly size: number;
  /** A complete parquet file of the job's rows. Rejects when the worker fails or dies, or `signal` aborts it while queued. */
  encode(job: EncodeJob, signal?: AbortSignal): Promise<Uint8Array>;
  stats(): EncoderPoolStats;
  /** The worker threads alive now, and whether each holds a job (tests kill one to see only its export fail). */
  threads(): ReadonlyArray<{ readonly worker: Worker; readonly busy: boolean }>;
  /** Terminates every worker; queued and running jobs are rejected, later ones too. */
  close(): Promise<void>;
}

// The worker module: compiled next to this one in dist/; when the service
// runs from its TypeScript sources (tests, `npm run dev`), the worker loads
// its .ts through tsx (a development dependency), as the main thread does.
const workerUrl = new URL(
  import.meta.url.endsWith(".ts") ? "./encoder-worker.ts" : "./encoder-worker.js",
  import.meta.url,
);

function startWorker(): Worker {
  if (!workerUrl.pathname.endsWith(".ts")) return new Worker(workerUrl);
  // tsx's ESM entry, by its package's own export map (a require() resolve
  // would name the CommonJS one).
  const require = createRequire(import.meta.url);
  const manifest = require.resolve("tsx/package.json");
  const { exports } = require(manifest) as { exports: Record<string, { import: { default: string } }> };
  const api = pathToFileURL(join(dirname(manifest), exports["./esm/api"]?.import.default ?? "")).href;
  const load = `import(${JSON.stringify(api)}).then((tsx) => tsx.tsImport(${JSON.stringify(workerUrl.href)}, ${JSON.stringify(import.meta.url)}))`;
  return new Worker(load, { eval: true });
}

interface Job {
  readonly id: number;
  readonly job: EncodeJob;
  readonly resolve: (file: Uint8Array) => void;
  readonly reject: (err: Error) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
}

interface Slot {
  readonly worker: Worker;
  job: Job | undefined;
  dead: boolean;
  wasmBytes: number;
}

export function createEncoderPool(size: number): EncoderPool {
  if (!Number.isInteger(size) || size < 1)
    throw new RangeError(`encoder pool size must be a whole number >= 1, got ${size}`);
  const slots: Slot[] = [];
  const queue: Job[] = [];
  let nextId = 1;
  let started = 0;
  let peakThreads = 0;
  let closed = false;

  const finish = (slot: Slot) => {
    const job = slot.job;
    slot.job = undefined;
    // An idle worker does not keep the process alive.
    slot.worker.unref();
    if (job) job.signal?.removeEventListener("abort", job.onAbort);
    return job;
  };

  // A worker that fails (uncaught error) fails its job at once and takes no
  // other; its place is free once the thread has exited, so a replacement
  // never runs alongside it beyond the cap.
  const fail = (slot: Slot, err: Error) => {
    slot.dead = true;
    finish(slot)?.reject(err);
  };
  const exited = (slot: Slot, code: number) => {
    fail(slot, new Error(`parquet encoder worker exited with code ${code}`));
    const at = slots.indexOf(slot);
    if (at >= 0) slots.splice(at, 1);
    pump();
  };

  const spawn = (): Slot => {
    const worker = startWorker();
    const slot: Slot = { worker, job: undefined, dead: false, wasmBytes: 0 };
    started += 1;
    slots.push(slot);
    peakThreads = Math.max(peakThreads, slots.length);
    worker.on("message", (m: WorkerReply) => {
      if (slot.dead || slot.job?.id !== m.id) return;
      if (m.spare) {
        slot.job.job.giveBack?.(m.spare);
        return;
      }
      if (m.wasmBytes !== undefined) slot.wasmBytes = m.wasmBytes;
      const job = finish(slot);
      if (m.file) job?.resolve(m.file);
      else job?.reject(new Error(`parquet encoder: ${m.error ?? "failed"}`));
      pump();
    });
    worker.on("error", (err) => fail(slot, err instanceof Error ? err : new Error(String(err))));
    worker.on("exit", (code) => exited(slot, code));
    return slot;
  };

  const pump = () => {
    while (!closed && queue.length > 0) {
      let slot = slots.find((s) => s.job === undefined && !s.dead);
      if (!slot) {
        if (slots.length >= size) return;
        slot = spawn();
      }
      const job = queue.shift() as Job;
      slot.job = job;
      slot.worker.ref();
      // Each buffer once: views into one buffer would make postMessage throw.
      const { batches = [], copy } = job.job;
      const transfer = [...new Set([...batches, ...(copy ? [copy.data] : [])].map((b) => b.buffer as ArrayBuffer))];
      const request: WorkerRequest = { id: job.id, options: job.job.options, batches, copy };
      slot.worker.postMessage(request, transfer);
    }
  };

  return {
    size,
    encode(job, signal) {
      if (closed) return Promise.reject(new Error("parquet encoder pool is closed"));
      if (signal?.aborted)
        return Promise.reject(signal.reason instanceof Error ? signal.reason : new Error("encoding abandoned"));
      return new Promise<Uint8Array>((resolve, reject) => {
        const entry: Job = {
          id: nextId++,
          job,
          resolve,
          reject,
          signal,
          // Leaves the queue; a job a worker already has runs to its end (its result is dropped).
          onAbort: () => {
            const at = queue.indexOf(entry);
            if (at < 0) return;
            queue.splice(at, 1);
            reject(signal?.reason instanceof Error ? signal.reason : new Error("encoding abandoned"));
          },
        };
        signal?.addEventListener("abort", entry.onAbort, { once: true });
        queue.push(entry);
        pump();
      });
    },
    stats() {
      return {
        size,
        threads: slots.length,
        peakThreads,
        started,
        queued: queue.length,
        busy: slots.filter((s) => s.job !== undefined).length,
        wasmBytes: slots.reduce((n, s) => n + s.wasmBytes, 0),
      };
    },
    threads() {
      return slots.map((s) => ({ worker: s.worker, busy: s.job !== undefined }));
    },
    async close() {
      closed = true;
      const err = new Error("parquet encoder pool is closed");
      for (const job of queue.splice(0)) {
        job.signal?.removeEventListener("abort", job.onAbort);
        job.reject(err);
      }
      await Promise.all(
        slots.slice().map(async (slot) => {
          fail(slot, err);
          await slot.worker.terminate();
        }),
      );
    },
  };
}
