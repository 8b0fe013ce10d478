// Rows -> one Arrow record batch, built straight from typed arrays with
// makeData (Arrow's builders are several times slower), serialised as an
// IPC stream for the encoder worker.
import {
  Bool,
  Field,
  Float64,
  Int32,
  Int64,
  List,
  makeData,
  RecordBatch,
  Schema,
  Struct,
  Table,
  tableToIPC,
  TimeUnit,
  Timestamp,
  Utf8,
} from "apache-arrow";
import type { Data, DataType } from "apache-arrow";
import type { QueryRow } from "../store/index.js";
import { int64Buffer, timestampBuffer, utf8Buffers } from "./column-buffers.js";
import type { ColumnKind, ColumnSpec } from "./columns.js";

function arrowType(kind: ColumnKind): DataType {
  switch (kind) {
    case "utf8":
      return new Utf8();
    case "int32":
      return new Int32();
    case "int64":
      return new Int64();
    case "float64":
      return new Float64();
    case "bool":
      return new Bool();
    case "timestamp":
      return new Timestamp(TimeUnit.MICROSECOND, "UTC");
    case "utf8_list":
      return new List(new Field("element", new Utf8(), true));
  }
}

export function arrowSchema(columns: readonly ColumnSpec[]): Schema {
  return new Schema(columns.map((c) => new Field(c.name, arrowType(c.kind), true)));
}

function utf8Data(values: readonly (string | null)[], validity: Uint8Array | undefined, nullCount: number): Data<Utf8> {
  const { offsets, data } = utf8Buffers(values);
  return makeData({
    type: new Utf8(),
    length: values.length,
    nullCount,
    ...(validity ? { nullBitmap: validity } : {}),
    valueOffsets: offsets,
    data,
  });
}

function columnData(col: ColumnSpec, type: DataType, rows: readonly QueryRow[]): Data {
  const n = rows.length;
  const values = rows.map((r) => col.get(r));
  let nullCount = 0;
  const validity = new Uint8Array((n + 7) >> 3);
  values.forEach((v, i) => {
    if (v === null) nullCount += 1;
    else validity[i >> 3] = (validity[i >> 3] ?? 0) | (1 << (i & 7));
  });
  const bitmap = nullCount > 0 ? validity : undefined;
  const common = { length: n, nullCount, ...(bitmap ? { nullBitmap: bitmap } : {}) };
  switch (col.kind) {
    case "utf8":
      return utf8Data(values as (string | null)[], bitmap, nullCount);
    case "int32":
      return makeData({
        type: type as Int32,
        ...common,
        data: Int32Array.from(values, (v) => (v as number | null) ?? 0),
      });
    case "float64":
      return makeData({
        type: type as Float64,
        ...common,
        data: Float64Array.from(values, (v) => (v as number | null) ?? 0),
      });
    case "int64":
      return makeData({
        type: type as Int64,
        ...common,
        data: int64Buffer(values as (string | number | bigint | null)[]),
      });
    case "timestamp":
      return makeData({ type: type as Timestamp, ...common, data: timestampBuffer(values as (string | null)[]) });
    case "bool": {
      const bits = new Uint8Array((n + 7) >> 3);
      values.forEach((v, i) => {
        if (v === true) bits[i >> 3] = (bits[i >> 3] ?? 0) | (1 << (i & 7));
      });
      return makeData({ type: type as Bool, ...common, data: bits });
    }
    case "utf8_list": {
      const offsets = new Int32Array(n + 1);
      const flat: string[] = [];
      values.forEach((v, i) => {
        if (v !== null) flat.push(...(v as readonly string[]));
        offsets[i + 1] = flat.length;
      });
      const child = utf8Data(flat, undefined, 0);
      return makeData({ type: type as List<Utf8>, ...common, valueOffsets: offsets, child });
    }
  }
}

/** An Arrow IPC stream holding one record batch of `rows` (none = just the schema). */
export function rowsToIpc(schema: Schema, columns: readonly ColumnSpec[], rows: readonly QueryRow[]): Uint8Array {
  const children = columns.map((c, i) => columnData(c, (schema.fields[i] as Field).type as DataType, rows));
  const struct = makeData({ type: new Struct(schema.fields), length: rows.length, nullCount: 0, children });
  const batch = new RecordBatch(schema, struct);
  return tableToIPC(new Table([batch]), "stream");
}
