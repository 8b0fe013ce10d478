// One parquet file as a stream of ~1 MiB chunks, in bounded memory: rows
// arrive as a binary COPY stream, cut here into row groups of whole rows
// and built into Arrow by the encoder workers (or, where the database
// cannot COPY, in batches of rows that become Arrow IPC here); every
// `rowGroupRows` rows go to the process's encoder pool as one job, up to the
// pool's size at once, so one export's row groups are encoded on every core;
// each job comes back as a small parquet file, checked to hold the rows sent,
// and its column chunks are stitched into the export's file in order. The
// bytes wait in a small queue that the consumer drains; the producer waits
// while that queue is full or its jobs are all in flight, so a slow client
// slows the database reads instead of filling memory. The footer is written
// last, only after every part was checked, and its row count is checked
// before it is sent: a failure before then leaves the client a file without
// a footer and an error, never a valid but truncated file.
import { ConnectError } from "@connectrpc/connect";
import { parquetMetadata } from "hyparquet";
import { internal, unavailable } from "../errors.js";
import type { QueryRow } from "../store/index.js";
import { arrowSchema, rowsToIpc } from "./arrow-batch.js";
import { exportSelect, type ColumnSpec } from "./columns.js";
import type { WireColumn } from "./copy-batch.js";
import { CopyRowSplitter, type CopyGroup, type GroupBuffers } from "./copy-rows.js";
import type { EncodeJob, EncoderOptions, EncoderPool } from "./encoder-pool.js";
import { ParquetStitcher } from "./stitch.js";

export interface ParquetExportOptions {
  readonly columns: readonly ColumnSpec[];
  /** Pushes every row, batch by batch; must stop (throw) when `write` throws. */
  readonly produce: (write: (rows: QueryRow[]) => Promise<void>) => Promise<void>;
  /**
   * The same rows as a binary COPY stream of the select list `select` (the
   * columns' own expressions), or undefined when the database cannot COPY;
   * then `produce` is used. With it, this thread only cuts the stream into
   * row groups and the encoder workers build the Arrow batches.
   */
  readonly copy?: (select: string) => Promise<AsyncIterable<Uint8Array> | undefined>;
  /** The process's encoder workers (PARQUET_ENCODER_WORKERS). */
  readonly encoders: EncoderPool;
  readonly chunkBytes?: number;
  readonly rowGroupRows?: number;
  /** Encoded bytes that may wait for the consumer before the producer pauses. */
  readonly highWaterBytes?: number;
  /** Told about failures that the client only sees as "internal error". */
  readonly onError?: (err: unknown) => void;
  /**
   * EXPORT_STALL_MS: when the consumer takes nothing for this long, the export
   * is ended (the producer stops, so its transaction and connection go back to
   * the pool) and `onStall` is told; a later read fails.
   */
  readonly stallMs?: number;
  readonly onStall?: () => void;
}

const MiB = 1024 * 1024;
/** Group buffers an export keeps for its next groups (one per worker is what circulates). */
const SPARE_BUFFERS = 2;

class Aborted extends Error {}

/** The client of an export read nothing for EXPORT_STALL_MS. */
class ExportStalled extends Error {}

export async function* parquetExport(options: ParquetExportOptions): AsyncGenerator<Uint8Array> {
  const chunkBytes = options.chunkBytes ?? MiB;
  const highWater = options.highWaterBytes ?? 4 * MiB;
  const rowGroupRows = options.rowGroupRows ?? 50_000;
  const columns = options.columns;
  const schema = arrowSchema(columns);
  const pool = options.encoders;
  const encoderOptions: EncoderOptions = {
    rowGroupRows,
    dataPageBytes: 64 * 1024,
    dictionaryColumns: columns.filter((c) => c.lowCardinality).map((c) => c.name),
  };

  const queue: Uint8Array[] = [];
  let queued = 0;
  let done = false;
  // Boxed so that a thrown `undefined` still counts as a failure and is rethrown as it was caught.
  let failure: { readonly error: unknown } | undefined;
  let aborted = false;
  let wake: (() => void) | undefined;
  let room: (() => void) | undefined;
  const signal = () => {
    wake?.();
    wake = undefined;
  };
  const push = (bytes: Uint8Array) => {
    queue.push(bytes);
    queued += bytes.length;
    signal();
  };
  let settled: (() => void) | undefined;
  const fail = (err: unknown) => {
    failure ??= { error: err };
    done = true;
    signal();
    room?.();
    settled?.();
  };
  // Queued jobs of an export that ended leave the pool's queue.
  const cancel = new AbortController();

  const stitcher = new ParquetStitcher();
  push(stitcher.header());
  // Jobs in flight, in row order; each settles into its part's bytes.
  const inFlight: Array<{ readonly rows: number; readonly file: Promise<Uint8Array> }> = [];
  // Hands finished parts to the stitcher in order, as soon as the oldest is back.
  let stitching = Promise.resolve();
  const stitchNext = () => {
    stitching = stitching.then(async () => {
      const head = inFlight[0];
      if (!head || failure !== undefined) return;
      const file = await head.file;
      if (failure !== undefined) return;
      push(stitcher.add(file, head.rows));
      inFlight.shift();
      settled?.();
    });
    stitching.catch(fail);
  };
  const dispatch = async (input: Pick<EncodeJob, "batches" | "copy" | "giveBack">, rows: number) => {
    while (inFlight.length >= pool.size && !aborted && failure === undefined) {
      await new Promise<void>((resolve) => {
        settled = resolve;
      });
      settled = undefined;
    }
    if (aborted) throw new Aborted("export abandoned");
    if (failure !== undefined) throw failure.error;
    const file = pool.encode({ options: encoderOptions, ...input }, cancel.signal);
    file.catch(() => undefined);
    inFlight.push({ rows, file });
    stitchNext();
  };

  let rows = 0;
  let group: Uint8Array[] = [];
  let groupRows = 0;
  /** Waits while the encoded bytes wait for the consumer; throws once the export has ended. */
  const haveRoom = async () => {
    while (queued > highWater && !aborted && failure === undefined) {
      await new Promise<void>((resolve) => {
        room = resolve;
      });
      room = undefined;
    }
    if (aborted) throw new Aborted("export abandoned");
    if (failure !== undefined) throw failure.error;
  };
  const write = async (batch: QueryRow[]) => {
    await haveRoom();
    rows += batch.length;
    // Row groups of exactly rowGroupRows rows: a batch may end one and start the next.
    for (let at = 0; at < batch.length;) {
      const take = Math.min(rowGroupRows - groupRows, batch.length - at);
      group.push(rowsToIpc(schema, columns, at === 0 && take === batch.length ? batch : batch.slice(at, at + take)));
      groupRows += take;
      at += take;
      if (groupRows === rowGroupRows) {
        const full = group;
        group = [];
        groupRows = 0;
        await dispatch({ batches: full }, rowGroupRows);
      }
    }
  };
  // The COPY path: whole rows cut into row groups here, their values read in the workers.
  const select = options.copy ? exportSelect(columns) : undefined;
  const wire: WireColumn[] = columns.map((c) => ({ name: c.name, kind: c.kind, wire: c.wire ?? "text" }));
  // A group's buffer goes to a worker whole and comes back once its rows are
  // read, for a later group: a long export gathers its groups in a few
  // buffers instead of leaving ~12 MB per group for the garbage collector
  // here and in the workers (where it waited for a collection, growing
  // the malloc arenas and so a long export's peak RSS).
  const spare: Uint8Array[] = [];
  const buffers: GroupBuffers = {
    alloc(least, size) {
      const at = spare.findIndex((b) => b.length >= least);
      return at >= 0 ? (spare.splice(at, 1)[0] as Uint8Array) : new Uint8Array(size);
    },
    free(buffer) {
      if (aborted || failure !== undefined) return;
      spare.push(buffer);
      // The largest few are kept.
      if (spare.length > SPARE_BUFFERS) spare.sort((a, b) => b.length - a.length).length = SPARE_BUFFERS;
    },
  };
  const fromCopy = async (stream: AsyncIterable<Uint8Array>) => {
    const splitter = new CopyRowSplitter(columns.length, rowGroupRows, buffers);
    const send = (g: CopyGroup) =>
      dispatch({ copy: { data: g.data, rows: g.rows, columns: wire }, giveBack: (b) => buffers.free(b) }, g.rows);
    for await (const chunk of stream) {
      await haveRoom();
      for (const g of splitter.push(chunk)) {
        rows = splitter.rows;
        await send(g);
      }
    }
    const last = splitter.end();
    rows = splitter.rows;
    if (last) await send(last);
  };
  const producer = (async () => {
    try {
      const stream = select !== undefined && options.copy ? await options.copy(select) : undefined;
      if (stream) await fromCopy(stream);
      else await options.produce(write);
      // An empty result still needs the schema to make a file.
      if (groupRows > 0 || rows === 0)
        await dispatch({ batches: groupRows > 0 ? group : [rowsToIpc(schema, columns, [])] }, groupRows);
      while (inFlight.length > 0 && failure === undefined) {
        await stitching;
        await Promise.resolve();
      }
      if (failure !== undefined) return;
      const tail = stitcher.finish();
      if (footerRows(tail) !== rows) throw new Error(`parquet footer does not hold the ${rows} rows written`);
      push(tail);
      done = true;
      signal();
    } catch (err) {
      fail(err);
    }
  })();

  // Bytes received and not yet sent, cut into chunkBytes pieces.
  const held: Uint8Array[] = [];
  let heldBytes = 0;
  const take = (n: number): Uint8Array => {
    const out = new Uint8Array(n);
    let at = 0;
    while (at < n) {
      const first = held[0] as Uint8Array;
      const part = Math.min(first.length, n - at);
      out.set(first.subarray(0, part), at);
      at += part;
      if (part === first.length) held.shift();
      else held[0] = first.subarray(part);
    }
    heldBytes -= n;
    return out;
  };

  let stalled = false;
  let stallTimer: ReturnType<typeof setTimeout> | undefined;
  // Hands chunks out; a chunk nobody takes within stallMs ends the export.
  const out = function* (chunks: Iterable<Uint8Array>): Generator<Uint8Array> {
    for (const chunk of chunks) {
      if (options.stallMs !== undefined) {
        stallTimer = setTimeout(() => {
          stalled = true;
          aborted = true;
          room?.();
          settled?.();
          options.onStall?.();
        }, options.stallMs);
      }
      yield chunk;
      clearTimeout(stallTimer);
      if (stalled) throw new ExportStalled("export client read nothing within EXPORT_STALL_MS");
    }
  };
  function* pieces(n: number): Iterable<Uint8Array> {
    while (heldBytes >= n) yield take(chunkBytes);
  }

  try {
    for (;;) {
      while (queue.length > 0) {
        const b = queue.shift() as Uint8Array;
        queued -= b.length;
        held.push(b);
        heldBytes += b.length;
      }
      room?.();
      yield* out(pieces(chunkBytes));
      if (failure !== undefined) break;
      if (done && queue.length === 0) break;
      await new Promise<void>((resolve) => {
        wake = resolve;
        if (queue.length > 0 || done) signal();
      });
    }
    await producer;
    if (failure !== undefined) throw failure.error;
    if (heldBytes > 0) yield* out([take(heldBytes)]);
  } catch (err) {
    if (err instanceof ConnectError) throw err;
    if (stalled) throw unavailable("the export client read nothing within EXPORT_STALL_MS; the export was ended");
    if (!(err instanceof Aborted)) options.onError?.(err);
    throw internal();
  } finally {
    clearTimeout(stallTimer);
    aborted = true;
    room?.();
    settled?.();
    cancel.abort(new Aborted("export ended"));
    await producer;
    spare.length = 0;
  }
}

/** The row count in the footer at the end of `tail`, or -1 when it cannot be read there. */
export function footerRows(tail: Uint8Array): number {
  try {
    const buf = tail.buffer.slice(tail.byteOffset, tail.byteOffset + tail.byteLength) as ArrayBuffer;
    return Number(parquetMetadata(buf).num_rows);
  } catch {
    return -1;
  }
}
