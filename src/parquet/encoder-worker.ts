// The body of one parquet encoder worker thread (encoder-pool.ts starts it):
// takes a job (a row group's rows as binary COPY tuples, or Arrow IPC
// streams), encodes it with parquet-wasm into a small, complete parquet
// file and posts the file back. Runs only inside a worker thread.
import { parentPort } from "node:worker_threads";
import * as arrow from "apache-arrow";
import * as pw from "parquet-wasm/node";
import { copyTuplesToIpc } from "./copy-batch.js";
import type { EncoderOptions, WorkerReply, WorkerRequest } from "./encoder-protocol.js";

// Built per job: transformParquetStream takes ownership of the properties
// (wasm-bindgen moves them), and a moved-out object passed again silently
// means the defaults (no compression).
function properties(o: EncoderOptions): pw.WriterProperties {
  let builder = new pw.WriterPropertiesBuilder()
    .setCompression(pw.Compression.SNAPPY)
    .setDataPageSizeLimit(o.dataPageBytes)
    .setMaxRowGroupSize(o.rowGroupRows)
    .setDictionaryEnabled(false);
  for (const c of o.dictionaryColumns) builder = builder.setColumnDictionaryEnabled(c, true);
  return builder.build();
}

async function encode(port: NonNullable<typeof parentPort>, m: WorkerRequest): Promise<Uint8Array> {
  const batches: pw.RecordBatch[] = [];
  const ipcs = m.copy ? [copyTuplesToIpc(arrow, m.copy.data, m.copy.rows, m.copy.columns)] : m.batches;
  // The rows are read: their buffer goes back for a later row group (and
  // leaves this heap now, not at its next collection).
  if (m.copy) {
    const buffer = m.copy.data.buffer as ArrayBuffer;
    m.copy = undefined;
    const reply: WorkerReply = { id: m.id, spare: new Uint8Array(buffer) };
    port.postMessage(reply, [buffer]);
  }
  for (const ipc of ipcs) {
    // The stream takes the batches; the Table must be freed here, or its
    // memory stays in the wasm heap (which never shrinks) until a garbage
    // collection that a worker's small JS heap seldom needs: ~8 MB a row group.
    const table = pw.Table.fromIPCStream(ipc);
    try {
      for (const b of table.recordBatches()) batches.push(b);
    } finally {
      table.free();
    }
  }
  let next = 0;
  const input = new ReadableStream<pw.RecordBatch>(
    {
      pull(controller) {
        const batch = batches[next++];
        if (batch) controller.enqueue(batch);
        else controller.close();
      },
    },
    { highWaterMark: 0 },
  );
  const encoded = (await pw.transformParquetStream(input, properties(m.options))) as ReadableStream<Uint8Array>;
  const out = encoded.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await out.read();
    if (done) break;
    parts.push(value);
    size += value.length;
  }
  const file = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    file.set(p, at);
    at += p.length;
  }
  return file;
}

const port = parentPort;
if (port) {
  port.on("message", (m: WorkerRequest) => {
    encode(port, m).then(
      (file) => {
        // parquet-wasm types it as WebAssembly.Memory, which this lib set does not declare.
        const memory = pw.wasmMemory() as unknown as { readonly buffer: ArrayBuffer };
        const reply: WorkerReply = { id: m.id, file, wasmBytes: memory.buffer.byteLength };
        port.postMessage(reply, [file.buffer as ArrayBuffer]);
      },
      (err: unknown) => {
        const reply: WorkerReply = { id: m.id, error: err instanceof Error ? err.message : String(err) };
        port.postMessage(reply);
      },
    );
  });
}
