// `resource-store export -o FILE`: one query written as parquet (the bytes of
// QueryParquet, streamed as they come) or NDJSON (Query paged by cursor, one
// flat resource a line). The file appears under its name only when complete.
import { createWriteStream, type WriteStream } from "node:fs";
import { rename, rm } from "node:fs/promises";
import { extname } from "node:path";
import { asyncBufferFromFile, parquetMetadataAsync } from "hyparquet";
import { fromJson, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import type { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import { resourceToFlat } from "../schema/flat-codec.js";
import type { ResourceStoreClient } from "../client/index.js";
import { CliError } from "./common.js";
import type { Progress } from "./progress.js";

export interface ExportOptions {
  readonly output: string;
  readonly payloadType?: string;
  readonly filters: readonly string[];
  readonly sortBy?: string;
  readonly sortOrder?: string;
}

const NO_VALUE_OPS = new Set(["is_null", "is_not_null"]);
const LIST_OPS = new Set(["in", "not_in"]);

/**
 * `field:op:value` -> a query condition. The value is sent as a string (the
 * service reads numbers and dates from strings); `in`/`not_in` take a
 * comma-separated list; `is_null`/`is_not_null` take none; a value written
 * `json:<JSON>` is sent as that JSON value.
 */
function parseFilter(spec: string): { field: string; op: string; value?: JsonValue } {
  const first = spec.indexOf(":");
  const second = first === -1 ? -1 : spec.indexOf(":", first + 1);
  const field = first === -1 ? spec : spec.slice(0, first);
  const op = first === -1 ? "" : second === -1 ? spec.slice(first + 1) : spec.slice(first + 1, second);
  const raw = second === -1 ? undefined : spec.slice(second + 1);
  if (field === "" || op === "")
    throw new CliError(`--filter ${JSON.stringify(spec)}: expected field:op:value (e.g. modality:eq:CT)`, 2);
  if (NO_VALUE_OPS.has(op)) {
    if (raw !== undefined && raw !== "")
      throw new CliError(`--filter ${JSON.stringify(spec)}: ${op} takes no value`, 2);
    return { field, op };
  }
  if (raw === undefined)
    throw new CliError(`--filter ${JSON.stringify(spec)}: ${op} needs a value (field:op:value)`, 2);
  if (raw.startsWith("json:")) {
    try {
      return { field, op, value: JSON.parse(raw.slice(5)) as JsonValue };
    } catch {
      throw new CliError(`--filter ${JSON.stringify(spec)}: the value after json: is not JSON`, 2);
    }
  }
  if (LIST_OPS.has(op)) return { field, op, value: raw === "" ? [] : raw.split(",") };
  return { field, op, value: raw };
}

function outputFormat(file: string): "parquet" | "ndjson" {
  const ext = extname(file).toLowerCase();
  if (ext === ".parquet") return "parquet";
  if (ext === ".ndjson" || ext === ".jsonl") return "ndjson";
  throw new CliError(`-o ${file}: the name must end in .parquet or .ndjson`, 2);
}

function queryOf(opts: ExportOptions): MessageInitShape<typeof QueryRequestSchema> {
  return {
    ...(opts.payloadType !== undefined ? { payloadType: opts.payloadType } : {}),
    filters: opts.filters.map(parseFilter).map((c) => ({
      field: c.field,
      op: c.op,
      ...(c.value !== undefined ? { value: fromJson(ValueSchema, c.value) } : {}),
    })),
    ...(opts.sortBy !== undefined ? { sortBy: opts.sortBy } : {}),
    ...(opts.sortOrder !== undefined ? { sortOrder: opts.sortOrder } : {}),
  };
}

async function write(out: WriteStream, data: Uint8Array | string): Promise<void> {
  if (!out.write(data)) {
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      out.once("error", onError);
      out.once("drain", () => {
        out.off("error", onError);
        resolve();
      });
    });
  }
}

async function closeStream(out: WriteStream): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    out.once("error", reject);
    out.end(() => resolve());
  });
}

export async function runExport(
  client: ResourceStoreClient,
  opts: ExportOptions,
  progress: Progress,
  wantTotal: boolean,
): Promise<number> {
  const format = outputFormat(opts.output);
  const query = queryOf(opts);
  // the total only feeds the bar and its ETA, so it is asked only when a bar is drawn
  const total = wantTotal ? Number((await client.query.count(query)).count) : undefined;
  const partial = `${opts.output}.partial`;
  const out = createWriteStream(partial);
  let rows = 0;
  let bytes = 0;
  try {
    if (format === "parquet") {
      for await (const chunk of client.query.queryParquet(query)) {
        bytes += chunk.data.length;
        await write(out, chunk.data);
        progress.update({ done: 0, rows, bytes });
      }
      await closeStream(out);
      rows = Number((await parquetMetadataAsync(await asyncBufferFromFile(partial))).num_rows);
    } else {
      let cursor: string | undefined;
      do {
        const page = await client.query.query({ ...query, ...(cursor !== undefined ? { cursor } : {}) });
        let text = "";
        for (const r of page.results) text += `${JSON.stringify(resourceToFlat(r, { children: false }))}\n`;
        rows += page.results.length;
        bytes += Buffer.byteLength(text);
        await write(out, text);
        progress.update({ done: rows, ...(total !== undefined ? { total } : {}), rows, bytes });
        cursor = page.nextCursor;
      } while (cursor !== undefined && cursor !== "");
      await closeStream(out);
    }
    await rename(partial, opts.output);
    progress.update({ done: rows, total: rows, rows, bytes });
    return rows;
  } catch (err) {
    out.destroy();
    await rm(partial, { force: true });
    throw err;
  }
}
