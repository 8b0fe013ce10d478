// Parquet files written in the test itself (apache-arrow + parquet-wasm), with
// the values kept so a preview can be checked against what was written.
import { randomBytes } from "node:crypto";
import {
  Binary,
  DateDay,
  Field,
  Float64,
  Int64,
  List,
  Struct,
  Table,
  TimestampMicrosecond,
  TimestampMillisecond,
  TimestampNanosecond,
  Utf8,
  makeData,
  makeVector,
  tableToIPC,
  vectorFromArray,
} from "apache-arrow";
import { Compression, Table as WasmTable, WriterPropertiesBuilder, writeParquet } from "parquet-wasm";

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

/**
 * Three rows of the awkward values: nested lists and structs, nulls,
 * non-finite doubles, timestamps in milliseconds (before 1970, after 9999)
 * and nanoseconds.
 */
export function writeAwkwardFixture(): Uint8Array {
  const table = new Table({
    tags: vectorFromArray([[1n, 2n], [], null], new List(new Field("item", new Int64(), true))),
    point: vectorFromArray(
      [{ a: "x", b: 1.5 }, null, { a: null, b: Number.NaN }],
      new Struct([new Field("a", new Utf8(), true), new Field("b", new Float64(), true)]),
    ),
    ratio: makeVector(
      makeData({ type: new Float64(), length: 3, data: new Float64Array([Number.NaN, Infinity, -0.5]) }),
    ),
    label: vectorFromArray(["x", null, "z"], new Utf8()),
    ms: makeVector(
      makeData({
        type: new TimestampMillisecond("UTC"),
        length: 3,
        data: new BigInt64Array([-1500n, 0n, 253_402_300_800_000n]),
      }),
    ),
    ns: makeVector(
      makeData({
        type: new TimestampNanosecond("UTC"),
        length: 3,
        data: new BigInt64Array([1_700_000_000_123_456_789n, -1n, 0n]),
      }),
    ),
  });
  return writeParquet(WasmTable.fromIPCStream(tableToIPC(table, "stream")));
}
