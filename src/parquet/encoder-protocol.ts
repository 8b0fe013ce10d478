// The messages between the encoder pool (encoder-pool.ts) and its worker
// threads (encoder-worker.ts).
import type { WireColumn } from "./copy-batch.js";

export interface EncoderOptions {
  /** Rows per row group. */
  readonly rowGroupRows: number;
  /** Columns worth a dictionary; every other column is written without one. */
  readonly dictionaryColumns: readonly string[];
  /** Data page size limit in bytes. */
  readonly dataPageBytes: number;
}

/** A job as the worker receives it: `batches` or `copy`, transferred. */
export interface WorkerRequest {
  readonly id: number;
  readonly options: EncoderOptions;
  readonly batches: readonly Uint8Array[];
  copy: { readonly data: Uint8Array; readonly rows: number; readonly columns: readonly WireColumn[] } | undefined;
}

/**
 * A worker's answer to job `id`: the rows' buffer handed back early
 * (`spare`), then either the parquet `file` (with the worker's WebAssembly
 * memory size) or an `error`.
 */
export interface WorkerReply {
  readonly id: number;
  readonly spare?: Uint8Array;
  readonly file?: Uint8Array;
  readonly wasmBytes?: number;
  readonly error?: string;
}
