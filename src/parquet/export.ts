// One parquet file as a stream of ~1 MiB chunks, in bounded memory: rows
// arrive in batches, become Arrow IPC in this thread, are encoded in a
// worker, and the bytes wait in a small queue that the consumer drains.
// The producer waits while that queue is full, so a slow client slows the
// database reads instead of filling memory. The tail of the file is held
// back until its footer proves the row count: the encoder can end with a
// valid but truncated file after an error, which must never reach a client.
import { ConnectError } from "@connectrpc/connect";
import { parquetMetadata } from "hyparquet";
import { internal, unavailable } from "../errors.js";
import type { QueryRow } from "../store/index.js";
import { arrowSchema, rowsToIpc } from "./arrow-batch.js";
import type { ColumnSpec } from "./columns.js";
import { startEncoder } from "./encoder.js";

export interface ParquetExportOptions {
  readonly columns: readonly ColumnSpec[];
  /** Pushes every row, batch by batch; must stop (throw) when `write` throws. */
  readonly produce: (write: (rows: QueryRow[]) => Promise<void>) => Promise<void>;
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

class Aborted extends Error {}

/** The client of an export read nothing for EXPORT_STALL_MS. */
export class ExportStalled extends Error {}

export async function* parquetExport(options: ParquetExportOptions): AsyncGenerator<Uint8Array> {
  const chunkBytes = options.chunkBytes ?? MiB;
  const highWater = options.highWaterBytes ?? 4 * MiB;
  const columns = options.columns;
  const schema = arrowSchema(columns);

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

  const encoder = startEncoder(
    {
      rowGroupRows: options.rowGroupRows ?? 50_000,
      dataPageBytes: 64 * 1024,
      dictionaryColumns: columns.filter((c) => c.lowCardinality).map((c) => c.name),
    },
    {
      chunk(bytes) {
        queue.push(bytes);
        queued += bytes.length;
        signal();
      },
      done() {
        done = true;
        signal();
      },
      error(err) {
        failure ??= { error: err };
        done = true;
        signal();
        room?.();
      },
    },
  );

  let rows = 0;
  const write = async (batch: QueryRow[]) => {
    while (queued > highWater && !aborted && failure === undefined) {
      await new Promise<void>((resolve) => {
        room = resolve;
      });
      room = undefined;
    }
    if (aborted) throw new Aborted("export abandoned");
    if (failure !== undefined) throw failure.error;
    rows += batch.length;
    await encoder.write(rowsToIpc(schema, columns, batch));
  };
  const producer = (async () => {
    try {
      await options.produce(write);
      // An empty result still needs the schema to make a file.
      if (rows === 0) await encoder.write(rowsToIpc(schema, columns, []));
      encoder.end();
    } catch (err) {
      failure ??= { error: err };
      done = true;
      signal();
    }
  })();

  // Bytes received and not yet sent; the last 2 chunks' worth stay here until the end.
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
      yield* out(pieces(2 * chunkBytes));
      if (failure !== undefined) break;
      if (done && queue.length === 0) break;
      await new Promise<void>((resolve) => {
        wake = resolve;
        if (queue.length > 0 || done) signal();
      });
    }
    await producer;
    if (failure !== undefined) throw failure.error;
    const tail = take(heldBytes);
    if (footerRows(tail) !== rows) throw new Error(`parquet footer does not hold the ${rows} rows written`);
    const parts: Uint8Array[] = [];
    for (let at = 0; at < tail.length; at += chunkBytes) parts.push(tail.subarray(at, at + chunkBytes));
    yield* out(parts);
  } catch (err) {
    if (err instanceof ConnectError) throw err;
    if (stalled) throw unavailable("the export client read nothing within EXPORT_STALL_MS; the export was ended");
    if (!(err instanceof Aborted)) options.onError?.(err);
    throw internal();
  } finally {
    clearTimeout(stallTimer);
    aborted = true;
    room?.();
    await encoder.terminate();
    await producer;
  }
}

/** The row count in the footer at the end of `tail`, or -1 when it cannot be read there. */
function footerRows(tail: Uint8Array): number {
  try {
    const buf = tail.buffer.slice(tail.byteOffset, tail.byteOffset + tail.byteLength) as ArrayBuffer;
    return Number(parquetMetadata(buf).num_rows);
  } catch {
    return -1;
  }
}
