// The process's one pool of parquet encoder workers: concurrent exports share
// it and never start more threads than its size (counted by wrapping
// worker_threads' Worker, not by the pool's own books); a worker that dies
// fails only the export whose row group it held, with the catalogue's
// internal error and no footer sent, and the next export works.
import { Code, ConnectError } from "@connectrpc/connect";
import { parquetMetadata, parquetReadObjects } from "hyparquet";
import type * as WorkerThreads from "node:worker_threads";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createEncoderPool, parquetExport, type ColumnSpec, type EncoderPool } from "../../src/parquet/index.js";
import type { QueryRow } from "../../src/store/index.js";

const threads = vi.hoisted(() => ({ live: 0, peak: 0, made: 0 }));

vi.mock("node:worker_threads", async (importOriginal) => {
  const real = await importOriginal<typeof WorkerThreads>();
  class CountedWorker extends real.Worker {
    constructor(...args: ConstructorParameters<typeof real.Worker>) {
      super(...args);
      threads.made += 1;
      threads.live += 1;
      threads.peak = Math.max(threads.peak, threads.live);
      this.once("exit", () => {
        threads.live -= 1;
      });
    }
  }
  return { ...real, Worker: CountedWorker, default: { ...real, Worker: CountedWorker } };
});

const columns: ColumnSpec[] = [
  { name: "identifier", kind: "utf8", lowCardinality: false, get: (r) => r.identifier },
  { name: "version", kind: "int64", lowCardinality: false, get: (r) => r.version },
];

/** The pool `p` with its encode replaced (the test's view of each job). */
function withEncode(p: EncoderPool, encode: EncoderPool["encode"]): EncoderPool {
  return { size: p.size, stats: () => p.stats(), threads: () => p.threads(), close: () => p.close(), encode };
}

function rowsOf(prefix: string, n: number): QueryRow[] {
  return Array.from(
    { length: n },
    (_, i) =>
      ({ identifier: `${prefix}-${String(i).padStart(6, "0")}`, version: String(i + 1) }) as unknown as QueryRow,
  );
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function exportOf(
  pool: EncoderPool,
  rows: QueryRow[],
  opts: { beforeBatch?: (i: number) => Promise<void>; onError?: (err: unknown) => void } = {},
): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  for await (const c of parquetExport({
    columns,
    encoders: pool,
    rowGroupRows: 1000,
    chunkBytes: 4096,
    ...(opts.onError ? { onError: opts.onError } : {}),
    produce: async (write) => {
      for (let at = 0, i = 0; at < rows.length; at += 700, i++) {
        await opts.beforeBatch?.(i);
        await write(rows.slice(at, at + 700));
      }
    },
  })) {
    parts.push(c);
  }
  return Buffer.concat(parts);
}

async function identifiers(file: Uint8Array): Promise<string[]> {
  const buf = file.buffer.slice(file.byteOffset, file.byteOffset + file.byteLength) as ArrayBuffer;
  const rows = await parquetReadObjects({ file: buf, columns: ["identifier"] });
  return rows.map((r) => r.identifier as string);
}

let pool: EncoderPool | undefined;
afterEach(async () => {
  await pool?.close();
  pool = undefined;
});

describe("parquet encoder pool", () => {
  it("serves more concurrent exports than it has workers, never starting more threads than its size", async () => {
    const before = { made: threads.made };
    threads.peak = threads.live;
    pool = createEncoderPool(2);
    expect(pool.stats().threads).toBe(0); // started lazily
    const N = 6;
    const inputs = Array.from({ length: N }, (_, k) => rowsOf(`e${k}`, 4500 + k * 300));
    const files = await Promise.all(inputs.map((rows) => exportOf(pool as EncoderPool, rows)));
    for (const [k, file] of files.entries()) {
      expect(await identifiers(file)).toEqual(inputs[k]?.map((r) => r.identifier));
      const meta = parquetMetadata(
        file.buffer.slice(file.byteOffset, file.byteOffset + file.byteLength) as ArrayBuffer,
      );
      expect(meta.row_groups.length).toBe(Math.ceil((inputs[k] as QueryRow[]).length / 1000));
    }
    expect(threads.made - before.made).toBe(2);
    expect(threads.peak).toBeLessThanOrEqual(2);
    expect(pool.stats()).toMatchObject({ size: 2, threads: 2, peakThreads: 2, started: 2, queued: 0, busy: 0 });
    expect(pool.stats().wasmBytes).toBeGreaterThan(0);
    await pool.close();
    for (let i = 0; i < 50 && threads.live > 0; i++) await sleep(20);
    expect(threads.live).toBe(0); // close terminates every worker
  }, 60_000);

  it("fails only the export whose worker died, with the internal error and no footer; the next export works", async () => {
    pool = createEncoderPool(2);
    const p = pool;
    // B writes its first row group, then waits until A's worker has been killed.
    let releaseB: () => void = () => undefined;
    const bWaits = new Promise<void>((r) => {
      releaseB = r;
    });
    const bRows = rowsOf("b", 5000);
    const b = exportOf(p, bRows, { beforeBatch: async (i) => (i === 2 ? bWaits : undefined) });
    for (let i = 0; i < 500 && !(p.stats().started >= 1 && p.stats().busy === 0 && p.stats().queued === 0); i++)
      await sleep(10);
    await sleep(50);

    // A: its first row group goes to the first idle worker, which is told to
    // stop just before the job is posted to it. Stopped after the post, a
    // worker that had already started may still finish and send its result
    // (seen under load): the job would not fail, and nothing would be tested.
    const errors: unknown[] = [];
    const aRows = rowsOf("a", 5000);
    let killed = 0;
    const killer = withEncode(p, (job, signal) => {
      // B holds no job now: the pool hands this job to its first idle worker.
      const idle = p.threads().filter((t) => !t.busy);
      if (killed === 0 && p.threads().length === idle.length && idle.length > 0) {
        killed += 1;
        void idle[0]?.worker.terminate();
      }
      return p.encode(job, signal);
    });
    let failure: unknown;
    let received: Uint8Array | undefined;
    try {
      received = await exportOf(killer, aRows, { onError: (e) => errors.push(e) });
    } catch (err) {
      failure = err;
    }
    expect(killed).toBe(1);
    expect(received).toBeUndefined();
    expect(failure).toBeInstanceOf(ConnectError);
    expect((failure as ConnectError).code).toBe(Code.Internal);
    expect((failure as ConnectError).rawMessage).toBe("internal error");
    expect(String(errors[0])).toMatch(/worker exited/);

    releaseB();
    expect(await identifiers(await b)).toEqual(bRows.map((r) => r.identifier));
    const cRows = rowsOf("c", 2500);
    expect(await identifiers(await exportOf(p, cRows))).toEqual(cRows.map((r) => r.identifier));
    expect(p.stats().started).toBe(3); // the dead worker was replaced
    expect(p.stats().peakThreads).toBeLessThanOrEqual(2);
  }, 60_000);

  it("keeps at most its size of one export's row groups in flight, and uses them all", async () => {
    pool = createEncoderPool(2);
    const p = pool;
    let outstanding = 0;
    let most = 0;
    const counting = withEncode(p, async (job, signal) => {
      outstanding += 1;
      most = Math.max(most, outstanding);
      try {
        const file = await p.encode(job, signal);
        await sleep(30); // a slow encoder: the next row group is built meanwhile
        return file;
      } finally {
        outstanding -= 1;
      }
    });
    const rows = rowsOf("f", 9000);
    expect(await identifiers(await exportOf(counting, rows))).toEqual(rows.map((r) => r.identifier));
    expect(most).toBe(2);
  }, 60_000);

  it("takes a job whose batches are views into one buffer", async () => {
    pool = createEncoderPool(1);
    const p = pool;
    const chunks: Uint8Array[] = [];
    for await (const c of parquetExport({ columns, encoders: p, produce: async (write) => write(rowsOf("v", 10)) }))
      chunks.push(c);
    const file = Buffer.concat(chunks);
    expect(Number(parquetMetadata(file.buffer.slice(file.byteOffset, file.byteOffset + file.length)).num_rows)).toBe(
      10,
    );
    // The same IPC stream twice, as two views of one buffer.
    const { arrowSchema, rowsToIpc } = await import("../../src/parquet/index.js");
    const ipc = rowsToIpc(arrowSchema(columns), columns, rowsOf("w", 5));
    const shared = new Uint8Array(ipc.length * 2);
    shared.set(ipc, 0);
    shared.set(ipc, ipc.length);
    const part = await p.encode({
      options: { rowGroupRows: 100, dataPageBytes: 65536, dictionaryColumns: [] },
      batches: [shared.subarray(0, ipc.length), shared.subarray(ipc.length)],
    });
    expect(
      Number(
        parquetMetadata(part.buffer.slice(part.byteOffset, part.byteOffset + part.length) as ArrayBuffer).num_rows,
      ),
    ).toBe(10);
  });

  it("hands a COPY job's whole buffer back once its rows are read, before the job settles", async () => {
    pool = createEncoderPool(1);
    // Two rows of one text column as binary COPY tuples, in a buffer with room to spare.
    const tuples = Buffer.concat(
      ["a", "bc"].map((v) => Buffer.concat([Buffer.from([0, 1, 0, 0, 0, v.length]), Buffer.from(v)])),
    );
    const data = new Uint8Array(new ArrayBuffer(tuples.length + 100), 0, tuples.length);
    data.set(tuples);
    const events: string[] = [];
    let back: Uint8Array | undefined;
    const file = pool
      .encode({
        options: { rowGroupRows: 100, dataPageBytes: 65536, dictionaryColumns: [] },
        copy: { data, rows: 2, columns: [{ name: "identifier", kind: "utf8", wire: "text" }] },
        giveBack: (b) => {
          back = b;
          events.push("back");
        },
      })
      .then((f) => {
        events.push("file");
        return f;
      });
    const part = await file;
    expect(events).toEqual(["back", "file"]);
    expect(back?.byteLength).toBe(tuples.length + 100);
    expect(Buffer.from(back?.subarray(0, tuples.length) ?? []).equals(tuples)).toBe(true);
    const rows = await parquetReadObjects({
      file: part.buffer.slice(part.byteOffset, part.byteOffset + part.byteLength) as ArrayBuffer,
    });
    expect(rows.map((r) => r.identifier)).toEqual(["a", "bc"]);
  });

  it("keeps a worker's WebAssembly memory flat from job to job", async () => {
    pool = createEncoderPool(1);
    const p = pool;
    const { arrowSchema, rowsToIpc } = await import("../../src/parquet/index.js");
    const wide: ColumnSpec[] = [
      ...columns,
      { name: "blob", kind: "utf8", lowCardinality: false, get: (r) => `${r.identifier}:${"x".repeat(200)}` },
    ];
    const schema = arrowSchema(wide);
    const job = (k: number) => ({
      options: { rowGroupRows: 10_000, dataPageBytes: 65536, dictionaryColumns: [] },
      batches: [rowsToIpc(schema, wide, rowsOf(`m${k}`, 10_000))],
    });
    const sizes: number[] = [];
    for (let k = 0; k < 24; k++) {
      await p.encode(job(k));
      sizes.push(p.stats().wasmBytes);
    }
    // Each job's input takes ~2.3 MB of the wasm heap: unfreed, the last 12 jobs grew it by ~9-27 MB
    // (as garbage collection happened to run); freed, by nothing once the allocator has warmed up.
    expect((sizes[23] as number) - (sizes[11] as number)).toBeLessThan(4 * 1024 * 1024);
  }, 60_000);
});
