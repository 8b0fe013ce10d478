// A page of rows from a parquet object without downloading it: the footer,
// then only the pages of the row groups that hold the rows asked for, each
// read with a ranged GET pinned to the ETag seen at the start (a file that
// changes underneath would otherwise mix two versions).
import type { JsonObject } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { cachedAsyncBuffer, parquetMetadataAsync, parquetReadObjects, parquetSchema } from "hyparquet";
import type { AsyncBuffer, FileMetaData, ParquetParsers, SchemaElement, SchemaTree } from "hyparquet";
import { compressors } from "hyparquet-compressors";
import { invalidArgument, previewTooLarge } from "../errors.js";
import { formatDate, formatTimestamp, toJsonSafe } from "./json-safe.js";
import type { ObjectStorage } from "./object-storage.js";

export const PREVIEW_DEFAULT_LIMIT = 100;
export const PREVIEW_MAX_LIMIT = 10_000;

/** Enough for the footer of most files in one request; larger ones take a second. */
const FOOTER_FETCH_BYTES = 64 * 1024;
/** "PAR1" + footer length + "PAR1": nothing shorter can be parquet. */
const MIN_PARQUET_BYTES = 12;

interface ParquetColumnInfo {
  readonly name: string;
  readonly type: string;
}

export interface ParquetPreview {
  readonly columns: string[];
  readonly schema: ParquetColumnInfo[];
  readonly totalRows: number;
  readonly returnedRows: number;
  readonly offset: number;
  readonly data: JsonObject[];
}

const decoder = new TextDecoder();

// Values leave hyparquet already in their JSON form: a JS Date would drop
// microseconds, and its default JSON parser throws on a malformed value.
const PARSERS: Partial<ParquetParsers> = {
  timestampFromMilliseconds: (ms: bigint) => formatTimestamp(ms, 1_000n, 6),
  timestampFromMicroseconds: (us: bigint) => formatTimestamp(us, 1_000_000n, 6),
  timestampFromNanoseconds: (ns: bigint) => formatTimestamp(ns, 1_000_000_000n, 9),
  dateFromDays: (days: number) => formatDate(days),
  jsonFromBytes: (bytes: Uint8Array | undefined) => {
    if (bytes === undefined) return undefined;
    const text = decoder.decode(bytes);
    try {
      return JSON.parse(text) as unknown;
    } catch {
      return text;
    }
  },
};

/** A readable name for a column's type: its logical type, else its physical one. */
function describeType(element: SchemaElement, isGroup: boolean): string {
  const logical = element.logical_type;
  if (logical !== undefined) {
    switch (logical.type) {
      case "TIMESTAMP":
      case "TIME":
        return `${logical.type}(${logical.unit}${logical.isAdjustedToUTC ? ", UTC" : ""})`;
      case "INTEGER":
        return `${logical.isSigned ? "INT" : "UINT"}${logical.bitWidth}`;
      case "DECIMAL":
        return `DECIMAL(${logical.precision}, ${logical.scale})`;
      default:
        return logical.type;
    }
  }
  const converted = element.converted_type;
  if (converted !== undefined) {
    if (converted === "UTF8") return "STRING";
    if (converted === "DECIMAL") return `DECIMAL(${element.precision ?? 0}, ${element.scale ?? 0})`;
    return converted;
  }
  if (isGroup) return "STRUCT";
  return element.type ?? "UNKNOWN";
}

function notParquet(): ConnectError {
  return invalidArgument("the object is not a readable parquet file", "NOT_PARQUET");
}

/** Rethrows storage errors as they are; anything hyparquet throws means the bytes are not parquet. */
function asPreviewError(err: unknown): ConnectError {
  return err instanceof ConnectError ? err : notParquet();
}

/** Reads the object, refusing (before reading) any range that would take the bytes read past `maxBytes`. */
function objectBuffer(
  storage: ObjectStorage,
  key: string,
  size: number,
  etag: string | undefined,
  maxBytes: number,
): AsyncBuffer {
  let read = 8; // the footer length, read before
  return cachedAsyncBuffer(
    {
      byteLength: size,
      async slice(start: number, end?: number): Promise<ArrayBuffer> {
        const stop = Math.min(end ?? size, size);
        const length = Math.max(0, stop - start);
        if (read + length > maxBytes) throw previewTooLarge(read + length, maxBytes);
        read += length;
        const bytes = await storage.readRange(key, start, stop, etag);
        if (bytes.byteLength !== stop - Math.min(start, stop)) throw notParquet();
        // hyparquet wants an ArrayBuffer of exactly this slice.
        return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
      },
    },
    { minSize: FOOTER_FETCH_BYTES },
  );
}

/**
 * Rows [offset, offset + limit) of the parquet object at `key`. A missing
 * object is 404 not_found, anything that is not parquet 400 invalid_argument.
 */
export async function previewParquet(
  storage: ObjectStorage,
  key: string,
  offset: number,
  limit: number,
  maxBytes: number = Number.MAX_SAFE_INTEGER,
): Promise<ParquetPreview> {
  const { size, etag } = await storage.headObject(key);
  if (size < MIN_PARQUET_BYTES) throw notParquet();
  // The footer length first (8 bytes): a forged one is refused before anything it names is read.
  const tail = await storage.readRange(key, size - 8, size, etag);
  if (tail.byteLength !== 8) throw notParquet();
  const footerLength = new DataView(tail.buffer, tail.byteOffset, 8).getUint32(0, true);
  if (footerLength + 8 > size - 4) throw notParquet();
  if (footerLength + 16 > maxBytes) throw previewTooLarge(footerLength + 16, maxBytes);
  const file = objectBuffer(storage, key, size, etag, maxBytes);

  let metadata: FileMetaData;
  let tree: SchemaTree;
  try {
    metadata = await parquetMetadataAsync(file, {
      parsers: PARSERS,
      // The whole footer in one request, as far as the budget allows.
      initialFetchSize: Math.min(size, Math.max(footerLength + 8, Math.min(FOOTER_FETCH_BYTES, maxBytes - 8))),
    });
    tree = parquetSchema(metadata);
  } catch (err) {
    throw asPreviewError(err);
  }

  const totalRows = Number(metadata.num_rows);
  const columns = tree.children.map((child) => child.element.name);
  const schema = tree.children.map((child) => ({
    name: child.element.name,
    type: describeType(child.element, child.children.length > 0 || child.element.type === undefined),
  }));

  const rowStart = Math.min(offset, totalRows);
  const rowEnd = Math.min(rowStart + limit, totalRows);
  let rows: Record<string, unknown>[] = [];
  if (rowEnd > rowStart) {
    try {
      rows = await parquetReadObjects({
        file,
        metadata,
        rowStart,
        rowEnd,
        useOffsetIndex: true,
        // Plain BYTE_ARRAY is binary (base64 below); STRING columns still decode.
        utf8: false,
        parsers: PARSERS,
        compressors,
      });
    } catch (err) {
      throw asPreviewError(err);
    }
  }

  const data = rows.map((row) => {
    const out: JsonObject = {};
    for (const name of columns) out[name] = toJsonSafe(row[name]);
    return out;
  });
  return { columns, schema, totalRows, returnedRows: data.length, offset, data };
}
