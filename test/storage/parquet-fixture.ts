// Parquet files written in the test itself (apache-arrow + parquet-wasm), with
// the values kept so a preview can be checked against what was written.
import { randomBytes } from "node:crypto";
import {
  Binary,
  DateDay,
  Float64,
  Int64,
  Table,
  TimestampMicrosecond,
  Utf8,
  makeData,
  makeVector,
  tableToIPC,
} from "apache-arrow";
import {
  Compression,
  Table as WasmTable,
  WriterPropertiesBuilder,
  writeParquet,
} from "parquet-wasm";

export interface Fixture {
  readonly bytes: Uint8Array;
  readonly rows: number;
  readonly ids: BigInt64Array;
  readonly scores: Float64Array;
  readonly micros: BigInt64Array;
  readonly days: Int32Array;
  name(i: number): string;
  blob(i: number): Uint8Array;
}

const NAME_BYTES = 32;
const BLOB_BYTES = 64;

function fixedWidthOffsets(rows: number, width: number): Int32Array {
  const offsets = new Int32Array(rows + 1);
  for (let i = 0; i <= rows; i++) offsets[i] = i * width;
  return offsets;
}

/**
 * `rows` rows of random, hardly compressible values in row groups of
 * `rowGroupRows`: about 124 bytes a row. Every third id is above 2^53.
 */
export function writeFixture(rows: number, rowGroupRows: number): Fixture {
  const ids = new BigInt64Array(rows);
  const scores = new Float64Array(rows);
  const micros = new BigInt64Array(rows);
  const days = new Int32Array(rows);
  const base = 1_700_000_000_000_000n;
  for (let i = 0; i < rows; i++) {
    ids[i] = i % 3 === 0 ? (1n << 60n) + BigInt(i) + 1n : BigInt(i);
    scores[i] = Math.random() * 1e6;
    micros[i] = base + BigInt(i) * 1_000_001n;
    days[i] = 19_000 + (i % 2000);
  }
  const names = Buffer.from(randomBytes((rows * NAME_BYTES) / 2).toString("hex"), "latin1");
  const blobs = randomBytes(rows * BLOB_BYTES);

  const table = new Table({
    id: makeVector(makeData({ type: new Int64(), length: rows, data: ids })),
    score: makeVector(makeData({ type: new Float64(), length: rows, data: scores })),
    ts: makeVector(makeData({ type: new TimestampMicrosecond("UTC"), length: rows, data: micros })),
    day: makeVector(makeData({ type: new DateDay(), length: rows, data: days })),
    name: makeVector(
      makeData({ type: new Utf8(), length: rows, valueOffsets: fixedWidthOffsets(rows, NAME_BYTES), data: names }),
    ),
    blob: makeVector(
      makeData({ type: new Binary(), length: rows, valueOffsets: fixedWidthOffsets(rows, BLOB_BYTES), data: blobs }),
    ),
  });
  const props = new WriterPropertiesBuilder()
    .setCompression(Compression.SNAPPY)
    .setMaxRowGroupSize(rowGroupRows)
    .setDataPageSizeLimit(64 * 1024)
    .setDictionaryEnabled(false)
    .build();
  const bytes = writeParquet(WasmTable.fromIPCStream(tableToIPC(table, "stream")), props);
  return {
    bytes,
    rows,
    ids,
    scores,
    micros,
    days,
    name: (i) => names.subarray(i * NAME_BYTES, (i + 1) * NAME_BYTES).toString("latin1"),
    blob: (i) => blobs.subarray(i * BLOB_BYTES, (i + 1) * BLOB_BYTES),
  };
}
