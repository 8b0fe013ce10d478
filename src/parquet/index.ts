// Parquet export: Arrow batches from query rows, encoded in a worker, streamed.
export { exportColumns, stampToMicros, type ColumnSpec, type ColumnKind } from "./columns.js";
export { arrowSchema, rowsToIpc } from "./arrow-batch.js";
export { parquetExport, type ParquetExportOptions } from "./export.js";
export { startEncoder, type Encoder, type EncoderOptions, type EncoderSink } from "./encoder.js";
