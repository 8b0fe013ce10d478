// Row groups encoded in parallel and stitched into one file: every column
// kind the export writes, with nulls and dictionaries, across many row
// groups, read back by hyparquet (page indexes too), DuckDB, and
// parquet-wasm into apache-arrow; and the compact-protocol codec that
// rewrites the footer round-trips a real footer byte for byte.
import { DuckDBInstance } from "@duckdb/node-api";
import { tableFromIPC } from "apache-arrow";
import { parquetMetadata, parquetReadObjects, readColumnIndex, readOffsetIndex } from "hyparquet";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readParquet } from "parquet-wasm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createEncoderPool,
  parquetExport,
  ParquetStitcher,
  readStruct,
  StitchError,
  writeStruct,
  type ColumnSpec,
  type EncoderPool,
} from "../../src/parquet/index.js";
import type { QueryRow } from "../../src/store/index.js";

type Row = {
  id: string;
  kind: string;
  license: string | null;
  n32: number | null;
  n64: string | null;
  f: number | null;
  ok: boolean | null;
  at: string | null;
  tags: string[] | null;
};

const N = 7321;
const ROW_GROUP = 1000;
const BIG = 2n ** 60n;

function row(i: number): Row {
  const micros = 1_700_000_000_000_000 + i * 1_000_003;
  const at = new Date(Math.floor(micros / 1000))
    .toISOString()
    .replace("Z", `${String(micros % 1000).padStart(3, "0")}Z`);
  return {
    id: `r-${String(i).padStart(6, "0")}`,
    kind: ["file", "series", "study"][i % 3] as string,
    license: i % 4 === 0 ? null : `L${i % 5}`,
    n32: i % 6 === 0 ? null : i - 3000,
    n64: i % 7 === 0 ? null : String(BIG + BigInt(i)),
    f: i % 8 === 0 ? null : i / 7,
    ok: i % 9 === 0 ? null : i % 2 === 0,
    at: i % 10 === 0 ? null : at,
    tags: i % 11 === 0 ? null : Array.from({ length: i % 4 }, (_, k) => `t${(i + k) % 13}`),
  };
}

const col = (
  name: string,
  kind: ColumnSpec["kind"],
  lowCardinality: boolean,
  get: (r: Row) => ReturnType<ColumnSpec["get"]>,
): ColumnSpec => ({
  name,
  kind,
  lowCardinality,
  get: (r) => get(r as unknown as Row),
});

const columns: ColumnSpec[] = [
  col("id", "utf8", false, (r) => r.id),
  col("kind", "utf8", true, (r) => r.kind),
  col("license", "utf8", true, (r) => r.license),
  col("n32", "int32", false, (r) => r.n32),
  col("n64", "int64", false, (r) => r.n64),
  col("f", "float64", false, (r) => r.f),
  col("ok", "bool", false, (r) => r.ok),
  col("at", "timestamp", false, (r) => r.at),
  col("tags", "utf8_list", false, (r) => r.tags),
];

const rows = Array.from({ length: N }, (_, i) => row(i));
const microsOf = (at: string | null): bigint | null =>
  at === null ? null : BigInt(Date.parse(at.slice(0, 23) + "Z")) * 1000n + BigInt(at.slice(23, 26));

let pool: EncoderPool;
let file: Uint8Array;
let buf: ArrayBuffer;
let dir: string;

beforeAll(async () => {
  pool = createEncoderPool(2);
  dir = await mkdtemp(join(tmpdir(), "rs-stitch-"));
  const parts: Uint8Array[] = [];
  for await (const c of parquetExport({
    columns,
    encoders: pool,
    rowGroupRows: ROW_GROUP,
    chunkBytes: 8192,
    produce: async (write) => {
      for (let at = 0; at < N; at += 777) await write(rows.slice(at, at + 777) as unknown as QueryRow[]);
    },
  })) {
    parts.push(c);
  }
  file = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    file.set(p, at);
    at += p.length;
  }
  buf = file.buffer.slice(0) as ArrayBuffer;
}, 60_000);

afterAll(async () => {
  await pool?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("stitched parquet export", () => {
  it("has every row group in order, with dictionaries and page indexes that point at the pages", () => {
    const meta = parquetMetadata(buf);
    expect(Number(meta.num_rows)).toBe(N);
    expect(meta.row_groups.length).toBe(Math.ceil(N / ROW_GROUP));
    expect(meta.row_groups.map((g) => Number(g.num_rows))).toEqual([...Array(7).fill(ROW_GROUP), N - 7 * ROW_GROUP]);
    expect(meta.row_groups.map((g) => g.ordinal)).toEqual(meta.row_groups.map((_, i) => i));
    const kind = meta.row_groups[3]?.columns[1]?.meta_data;
    expect(kind?.encodings).toContain("RLE_DICTIONARY");
    expect(Number(kind?.dictionary_page_offset)).toBeGreaterThan(4);
    expect(meta.row_groups[3]?.columns[0]?.meta_data?.encodings).not.toContain("RLE_DICTIONARY");
    // Row groups follow each other with no gap and no overlap.
    let end = 4;
    for (const g of meta.row_groups) {
      for (const c of g.columns) {
        const md = c.meta_data;
        const start = Number(md?.dictionary_page_offset ?? md?.data_page_offset);
        expect(start).toBe(end);
        end = start + Number(md?.total_compressed_size);
      }
    }
    // Every offset index entry points at a page header inside its column chunk.
    for (const g of meta.row_groups) {
      for (const c of g.columns) {
        const oi = readOffsetIndex({
          view: new DataView(buf, Number(c.offset_index_offset), Number(c.offset_index_length)),
          offset: 0,
        });
        expect(Number(oi.page_locations[0]?.offset)).toBe(Number(c.meta_data?.data_page_offset));
        const ci = readColumnIndex(
          { view: new DataView(buf, Number(c.column_index_offset), Number(c.column_index_length)), offset: 0 },
          meta.schema.find((s) => s.name === c.meta_data?.path_in_schema.at(-1)) as never,
        );
        expect(ci.null_pages.length).toBe(oi.page_locations.length);
      }
    }
  });

  it("reads back value for value with hyparquet, through the offset index too", async () => {
    for (const useOffsetIndex of [false, true]) {
      const back = await parquetReadObjects({
        file: buf,
        useOffsetIndex,
        ...(useOffsetIndex ? { rowStart: 2500, rowEnd: 4100 } : {}),
      });
      const from = useOffsetIndex ? 2500 : 0;
      expect(back.length).toBe(useOffsetIndex ? 1600 : N);
      back.forEach((b, k) => {
        const r = rows[from + k] as Row;
        expect(b.id).toBe(r.id);
        expect(b.kind).toBe(r.kind);
        expect(b.license).toBe(r.license);
        expect(b.n32).toBe(r.n32);
        expect(b.n64).toBe(r.n64 === null ? null : BigInt(r.n64));
        expect(b.f).toBe(r.f);
        expect(b.ok).toBe(r.ok);
        expect(b.at === null ? null : (b.at as Date).toISOString().slice(0, 23)).toBe(
          r.at === null ? null : r.at.slice(0, 23),
        );
        // hyparquet reads a null list as undefined.
        expect(b.tags ?? null).toEqual(r.tags);
      });
    }
  });

  it("reads back with DuckDB", async () => {
    const path = join(dir, "stitched.parquet");
    await writeFile(path, file);
    const db = await DuckDBInstance.create(":memory:");
    const con = await db.connect();
    try {
      const q = async (sql: string) => (await con.runAndReadAll(sql)).getRows();
      const [agg] = await q(
        `SELECT count(*), count(license), sum(n32), count(n64), max(n64)::VARCHAR, sum(f), count(ok), sum(ok::INT), count("at"), sum(len(tags)), count(DISTINCT kind) FROM read_parquet('${path}')`,
      );
      const expected = [
        N,
        rows.filter((r) => r.license !== null).length,
        rows.reduce((n, r) => n + (r.n32 ?? 0), 0),
        rows.filter((r) => r.n64 !== null).length,
        String(BIG + BigInt(N - 1 - ((N - 1) % 7 === 0 ? 1 : 0))),
        rows.reduce((n, r) => n + (r.f ?? 0), 0),
        rows.filter((r) => r.ok !== null).length,
        rows.filter((r) => r.ok === true).length,
        rows.filter((r) => r.at !== null).length,
        rows.reduce((n, r) => n + (r.tags?.length ?? 0), 0),
        3,
      ];
      expect(
        agg?.map((v, i) => (i === 5 ? Math.round(Number(v) * 1000) : typeof v === "bigint" ? Number(v) : v)),
      ).toEqual(expected.map((v, i) => (i === 5 ? Math.round(Number(v) * 1000) : v)));
      const [one] = await q(
        `SELECT id, epoch_us("at")::VARCHAR, tags::VARCHAR FROM read_parquet('${path}') WHERE id = 'r-004321'`,
      );
      const r = rows[4321] as Row;
      expect(one).toEqual([r.id, String(microsOf(r.at)), `[${(r.tags ?? []).join(", ")}]`]);
      const groups = await q(`SELECT count(DISTINCT row_group_id) FROM parquet_metadata('${path}')`);
      expect(Number(groups[0]?.[0])).toBe(Math.ceil(N / ROW_GROUP));
    } finally {
      con.closeSync();
    }
  });

  it("reads back with parquet-wasm into apache-arrow", () => {
    const table = tableFromIPC(readParquet(file).intoIPCStream());
    expect(table.numRows).toBe(N);
    const get = (name: string, i: number): unknown => table.getChild(name)?.get(i);
    for (const i of [0, 1, 999, 1000, 4321, 6999, 7000, N - 1]) {
      const r = rows[i] as Row;
      expect(get("id", i)).toBe(r.id);
      expect(get("kind", i)).toBe(r.kind);
      expect(get("license", i)).toBe(r.license);
      expect(get("n32", i)).toBe(r.n32);
      expect(get("n64", i)).toBe(r.n64 === null ? null : BigInt(r.n64));
      expect(get("f", i)).toBe(r.f);
      expect(get("ok", i)).toBe(r.ok);
      const at = get("at", i);
      // apache-arrow gives microsecond timestamps as fractional milliseconds.
      expect(at === null ? null : BigInt(Math.round((at as number) * 1000))).toBe(microsOf(r.at));
      const tags = get("tags", i) as { toArray(): string[] } | null;
      expect(tags === null ? null : [...tags.toArray()]).toEqual(r.tags);
    }
  });
});

describe("thrift compact codec and stitcher", () => {
  it("writes a parsed footer back byte for byte", () => {
    const len = new DataView(buf, buf.byteLength - 8, 4).getUint32(0, true);
    const footer = file.subarray(file.length - 8 - len, file.length - 8);
    const { value, end } = readStruct(footer);
    expect(end).toBe(footer.length);
    expect(writeStruct(value)).toEqual(footer);
  });

  it("refuses a part that does not hold the rows sent, or is not parquet", () => {
    const s = new ParquetStitcher();
    expect(() => s.add(file, N + 1)).toThrow(StitchError);
    expect(() => s.add(file.subarray(0, file.length - 1), N)).toThrow(StitchError);
    expect(() => s.add(new Uint8Array(64), 0)).toThrow(StitchError);
  });
});
