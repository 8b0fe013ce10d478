// The records of an import file, read as a stream: NDJSON (one flat create
// object a line), a JSON array of such objects, or a parquet file with the
// columns of /query/parquet's export. Memory stays bounded by one chunk of
// text (or one parquet row group), whatever the size of the file.
import { createReadStream } from "node:fs";
import { open, stat } from "node:fs/promises";
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects, type ParquetParsers } from "hyparquet";
import { compressors } from "hyparquet-compressors";

export type InputFormat = "ndjson" | "json" | "parquet";

export interface InputRecord {
  /** 1-based line of the record's start (row number for parquet). */
  readonly line: number;
  /** The parsed record, or why it could not be parsed. */
  readonly value: unknown;
  readonly error?: string;
  /** Bytes of the file consumed so far (for progress). */
  readonly position: number;
}

/** Picks the format from the first bytes: `PAR1` is parquet, `[` a JSON array, anything else NDJSON. */
export async function detectFormat(file: string): Promise<InputFormat> {
  const fh = await open(file, "r");
  try {
    const buf = Buffer.alloc(4096);
    const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
    const head = buf.subarray(0, bytesRead);
    if (head.subarray(0, 4).toString("latin1") === "PAR1") return "parquet";
    const text = head
      .toString("utf8")
      .replace(/^\uFEFF/, "")
      .trimStart();
    return text.startsWith("[") ? "json" : "ndjson";
  } finally {
    await fh.close();
  }
}

export async function fileSize(file: string): Promise<number> {
  return (await stat(file)).size;
}

function parseJson(text: string): { value: unknown; error?: string } {
  try {
    return { value: JSON.parse(text) as unknown };
  } catch (err) {
    return { value: undefined, error: `not JSON: ${err instanceof Error ? err.message : String(err)}` };
  }
}

/** NDJSON: one record a non-blank line; the stream is read with backpressure. */
async function* readNdjson(file: string): AsyncGenerator<InputRecord> {
  let carry: Buffer | undefined;
  let line = 0;
  let position = 0;
  for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>) {
    let buf = carry ? Buffer.concat([carry, chunk]) : chunk;
    carry = undefined;
    let start = 0;
    for (let nl = buf.indexOf(10, start); nl !== -1; nl = buf.indexOf(10, start)) {
      line++;
      const text = buf.toString("utf8", start, nl);
      position += nl + 1 - start;
      start = nl + 1;
      if (text.trim() === "") continue;
      yield { line, position, ...parseJson(text) };
    }
    buf = buf.subarray(start);
    if (buf.length > 0) carry = Buffer.from(buf);
  }
  if (carry && carry.toString("utf8").trim() !== "") {
    line++;
    position += carry.length;
    yield { line, position, ...parseJson(carry.toString("utf8")) };
  }
}

/**
 * A JSON array of objects, element by element: a small scanner finds where
 * each top-level element ends (strings and nesting respected) and parses only
 * that slice.
 */
async function* readJsonArray(file: string): AsyncGenerator<InputRecord> {
  let line = 1;
  let position = 0;
  let depth = 0; // 0 before '[', 1 inside the array, >1 inside an element
  let inString = false;
  let escaped = false;
  let started = false; // the current element has begun
  let elementLine = 1;
  let parts: string[] = [];
  let ended = false;
  for await (const chunk of createReadStream(file, {
    encoding: "utf8",
    highWaterMark: 1 << 20,
  }) as AsyncIterable<string>) {
    position += Buffer.byteLength(chunk, "utf8");
    let from = 0;
    const take = (upto: number): string => {
      parts.push(chunk.slice(from, upto));
      const text = parts.join("");
      parts = [];
      return text;
    };
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk.charCodeAt(i);
      if (c === 10) line++;
      const blank = c <= 32 || c === 0xfeff;
      if (ended) {
        if (!blank) {
          yield { line, position, value: undefined, error: "text after the end of the JSON array" };
          return;
        }
        continue;
      }
      if (inString) {
        if (escaped) escaped = false;
        else if (c === 92) escaped = true;
        else if (c === 34) inString = false;
        continue;
      }
      if (depth === 0) {
        if (c === 91) {
          depth = 1;
          from = i + 1;
        } else if (!blank) {
          yield { line, position, value: undefined, error: "a JSON array must start with [" };
          return;
        }
        continue;
      }
      if (depth === 1 && (c === 44 || c === 93)) {
        const text = take(i);
        from = i + 1;
        if (started) yield { line: elementLine, position, ...parseJson(text) };
        else if (c === 44) yield { line, position, value: undefined, error: "empty array element" };
        started = false;
        if (c === 93) {
          depth = 0;
          ended = true;
        }
        continue;
      }
      if (depth === 1 && !blank && !started) {
        started = true;
        elementLine = line;
      }
      if (c === 34) inString = true;
      else if (c === 123 || c === 91) depth++;
      else if (c === 125 || c === 93) depth--;
    }
    if (depth >= 1) parts.push(chunk.slice(from));
  }
  if (!ended) yield { line, position, value: undefined, error: "the JSON array is not closed with ]" };
}

const decoder = new TextDecoder();

// Values as JSON: timestamps as RFC 3339 text, int64 as decimal strings.
const PARSERS: Partial<ParquetParsers> = {
  timestampFromMicroseconds: (us: bigint) => new Date(Number(us / 1000n)).toISOString(),
  timestampFromMilliseconds: (ms: bigint) => new Date(Number(ms)).toISOString(),
  jsonFromBytes: (bytes: Uint8Array | undefined) => (bytes === undefined ? undefined : decoder.decode(bytes)),
};

/** Export columns that a create does not take (the service sets them). */
const OUTPUT_ONLY = new Set(["created_at", "updated_at", "version", "children"]);

/** One exported row -> the flat create shape. */
function parquetRowToFlat(row: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, raw] of Object.entries(row)) {
    if (OUTPUT_ONLY.has(key) || raw === null || raw === undefined) continue;
    let value: unknown = typeof raw === "bigint" ? raw.toString() : raw;
    if (key === "payload" && typeof value === "string") {
      // the payload column of an export without a payload type: the flat payload fields as JSON
      Object.assign(out, JSON.parse(value) as Record<string, unknown>);
      continue;
    }
    if (key === "metrics" && typeof value === "string") value = JSON.parse(value) as unknown;
    out[key] = value;
  }
  return out;
}

/** Parquet, one row group at a time (the export's row groups are bounded). */
async function* readParquet(file: string): AsyncGenerator<InputRecord> {
  const buffer = await asyncBufferFromFile(file);
  const metadata = await parquetMetadataAsync(buffer);
  let row = 0;
  let position = 0;
  for (const group of metadata.row_groups) {
    const n = Number(group.num_rows);
    const rows = (await parquetReadObjects({
      file: buffer,
      metadata,
      rowStart: row,
      rowEnd: row + n,
      compressors,
      parsers: PARSERS,
    })) as Record<string, unknown>[];
    position += group.columns.reduce((s, c) => s + Number(c.meta_data?.total_compressed_size ?? 0n), 0);
    for (const r of rows) {
      row++;
      let value: unknown;
      let error: string | undefined;
      try {
        value = parquetRowToFlat(r);
      } catch (err) {
        error = `row ${row}: ${err instanceof Error ? err.message : String(err)}`;
      }
      yield {
        line: row,
        position: Math.min(position, buffer.byteLength),
        value,
        ...(error !== undefined ? { error } : {}),
      };
    }
  }
}

export async function* readInput(file: string, format: InputFormat): AsyncGenerator<InputRecord> {
  if (format === "parquet") yield* readParquet(file);
  else if (format === "json") yield* readJsonArray(file);
  else yield* readNdjson(file);
}
