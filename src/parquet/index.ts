// Parquet export: Arrow batches from query rows, row groups encoded on the
// process's pool of encoder workers, stitched into one file, streamed.
export { exportColumns, exportSelect, payloadColumn, type ColumnSpec } from "./columns.js";
export { copyTuplesToIpc, type WireColumn } from "./copy-batch.js";
export { CopyRowSplitter, CopyFormatError, type GroupBuffers } from "./copy-rows.js";
export { arrowSchema, rowsToIpc } from "./arrow-batch.js";
export { footerRows, parquetExport } from "./export.js";
export { createEncoderPool, type EncoderPool } from "./encoder-pool.js";
export { ParquetStitcher, StitchError } from "./stitch.js";
export { readStruct, writeStruct } from "./thrift-compact.js";
export { int64Buffer, timestampBuffer, utf8Buffers } from "./column-buffers.js";
// The stamp conversions the columns use live in src/time.ts; the names the parquet tests know are kept.
export { stampMicros as stampToMicros, stampMicrosNumber as stampMicrosExact } from "../time.js";
export { createExportGate } from "./export-gate.js";
