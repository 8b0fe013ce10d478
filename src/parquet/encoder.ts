// The parquet encoder runs in a worker thread: parquet-wasm's encoding of a
// row group blocks for tens of milliseconds, which the event loop must not.
// The worker feeds Arrow IPC batches into transformParquetStream and posts
// the bytes back. Credit-based flow: the main side sends the next batch
// only when the worker's input stream has asked for one.
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";

export interface EncoderOptions {
  /** Rows per row group. */
  readonly rowGroupRows: number;
  /** Columns worth a dictionary; every other column is written without one. */
  readonly dictionaryColumns: readonly string[];
  /** Data page size limit in bytes. */
  readonly dataPageBytes: number;
}

export interface Encoder {
  /** Resolves once the worker took the batch (backpressure). */
  write(ipc: Uint8Array): Promise<void>;
  /** No more batches; the stream of chunks ends after the footer. */
  end(): void;
  terminate(): Promise<void>;
}

/** Receives each output chunk in order, then `done` after the last, or `error`. */
export interface EncoderSink {
  chunk(bytes: Uint8Array): void;
  done(): void;
  error(err: Error): void;
}

// Kept as source text: worker_threads cannot load a .ts module without a
// loader, and the build does not copy .js files next to the compiled ones.
const WORKER_SOURCE = String.raw`
const { parentPort, workerData } = require("node:worker_threads");
const pw = require(workerData.parquetWasm);
const o = workerData.options;
let builder = new pw.WriterPropertiesBuilder()
  .setCompression(pw.Compression.SNAPPY)
  .setDataPageSizeLimit(o.dataPageBytes)
  .setMaxRowGroupSize(o.rowGroupRows)
  .setDictionaryEnabled(false);
for (const c of o.dictionaryColumns) builder = builder.setColumnDictionaryEnabled(c, true);
const props = builder.build();
const queue = [];
let ended = false;
let pending = null;
function feed(controller) {
  while (queue.length > 0) {
    const ipc = queue.shift();
    const table = pw.Table.fromIPCStream(ipc);
    for (const b of table.recordBatches()) controller.enqueue(b);
    return true;
  }
  if (ended) { controller.close(); return true; }
  return false;
}
const input = new ReadableStream({
  pull(controller) {
    if (feed(controller)) return;
    parentPort.postMessage({ type: "ready" });
    return new Promise((resolve) => { pending = () => { pending = null; feed(controller); resolve(); }; });
  },
}, { highWaterMark: 0 });
parentPort.on("message", (m) => {
  if (m.type === "batch") queue.push(m.ipc);
  else if (m.type === "end") ended = true;
  if (pending) pending();
});
(async () => {
  try {
    const out = await pw.transformParquetStream(input, props);
    const reader = out.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const copy = new Uint8Array(value);
      parentPort.postMessage({ type: "chunk", bytes: copy }, [copy.buffer]);
    }
    parentPort.postMessage({ type: "done" });
  } catch (err) {
    parentPort.postMessage({ type: "error", message: String(err && err.message || err) });
  }
})();
`;

const parquetWasmPath = createRequire(import.meta.url).resolve("parquet-wasm/node");

export function startEncoder(options: EncoderOptions, sink: EncoderSink): Encoder {
  const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { parquetWasm: parquetWasmPath, options } });
  let credit = 0;
  let waiter: (() => void) | undefined;
  let finished = false;
  let failed: Error | undefined;
  const fail = (err: Error) => {
    if (finished) return;
    finished = true;
    failed = err;
    waiter?.();
    sink.error(err);
  };
  worker.on("message", (m: { type: string; bytes?: Uint8Array; message?: string }) => {
    if (m.type === "ready") {
      credit += 1;
      waiter?.();
    } else if (m.type === "chunk" && m.bytes) {
      sink.chunk(m.bytes);
    } else if (m.type === "done") {
      finished = true;
      sink.done();
    } else if (m.type === "error") {
      fail(new Error(`parquet encoder: ${m.message ?? "failed"}`));
    }
  });
  worker.on("error", (err) => fail(err));
  worker.on("exit", (code) => {
    if (!finished) fail(new Error(`parquet encoder exited with code ${code}`));
  });
  return {
    async write(ipc) {
      while (credit === 0 && failed === undefined) {
        await new Promise<void>((resolve) => {
          waiter = resolve;
        });
        waiter = undefined;
      }
      if (failed) throw failed;
      credit -= 1;
      worker.postMessage({ type: "batch", ipc }, [ipc.buffer as ArrayBuffer]);
    },
    end() {
      worker.postMessage({ type: "end" });
    },
    async terminate() {
      finished = true;
      await worker.terminate();
    },
  };
}
