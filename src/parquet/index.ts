// Parquet export: Arrow batches from query rows, encoded in a worker, streamed.
export { exportColumns, type ColumnSpec, type ColumnKind } from "./columns.js";
export { arrowSchema, rowsToIpc } from "./arrow-batch.js";
export { parquetExport, type ParquetExportOptions } from "./export.js";
export { startEncoder, type Encoder, type EncoderOptions, type EncoderSink } from "./encoder.js";
export { int64Buffer, timestampBuffer, utf8Buffers, type Utf8Buffers } from "./column-buffers.js";
// The stamp conversions the columns use live in src/time.ts; the names the parquet tests know are kept.
export { stampMicros as stampToMicros, stampMicrosNumber as stampMicrosExact } from "../time.js";
export { createExportGate, type ExportGate } from "./export-gate.js";
export { ParquetStitcher, StitchError } from "./stitch.js";
export { readStruct, writeStruct, ThriftError, type ThriftStruct } from "./thrift-compact.js";
