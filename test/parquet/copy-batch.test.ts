// The COPY path of the parquet export (docs/benchmarks/parquet.md, "Parquet off the main thread") makes the very Arrow batch
// the row path makes of the same rows: PostgreSQL's binary COPY tuples read
// in a worker (copy-batch.ts) against the rows `pg` parses (columns.ts
// getters + arrow-batch.ts), for every column kind and the awkward values
// (escapes, non-ASCII, wrong JSON types, numbers past 2^53, timestamps
// before 2000). Also: the main thread's cutting into row groups does not
// depend on where the stream's pieces end, and inlined parameters read as
// bound ones.
import * as arrow from "apache-arrow";
import { beforeAll, expect, it } from "vitest";
import { fromJson } from "@bufbuild/protobuf";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import {
  arrowSchema,
  copyTuplesToIpc,
  CopyFormatError,
  CopyRowSplitter,
  exportColumns,
  exportSelect,
  payloadColumn,
  rowsToIpc,
  type ColumnSpec,
  type WireColumn,
} from "../../src/parquet/index.js";
import {
  openDatabase,
  planQuery,
  resourceColumns,
  type QueryField,
  type QueryRow,
  type SqlType,
} from "../../src/store/index.js";
import { describeBackends, type Backend } from "../store/backends.js";

const field = (name: string, type: SqlType): QueryField => ({
  name,
  type,
  source: "payload",
  nullable: true,
  key: name,
  expr: () => "NULL",
});

/** Metadata, the untyped payload as JSON, then one payload column of every kind. */
const columns: ColumnSpec[] = [
  ...exportColumns(planQuery(fromJson(QueryRequestSchema, {}))),
  payloadColumn(field("s", "text"), false),
  payloadColumn(field("i", "int"), false),
  payloadColumn(field("b", "bigint"), false),
  payloadColumn(field("f", "float8"), false),
  payloadColumn(field("t", "bool"), true),
  payloadColumn(field("m", "json_map"), false),
  payloadColumn(field("l", "text_list"), false),
];
const wire: WireColumn[] = columns.map((c) => ({ name: c.name, kind: c.kind, wire: c.wire as WireColumn["wire"] }));

const PAYLOADS: Record<string, unknown>[] = [
  { s: "plain", i: 5, b: "123", f: 1.5, t: true, m: { a: 1.5 }, l: ["a", "b"] },
  {
    s: 'quo"te\\back\nline ü 😀',
    i: -7,
    b: -42,
    f: "2.25",
    t: false,
    m: { 'k"ey': -0.5, z: 1e21 },
    l: ['x"y', "", "ü\\"],
  },
  // BIG: a JSON number with more digits than a double holds (written into the text below).
  { s: 12, i: "9", b: "BIG", f: "abc", t: "true", m: null, l: "notalist" },
  {},
  { i: 3.7, b: "9007199254740993", f: 1e308, m: {}, l: [], s: "" },
  { i: 4294967297, b: "  12", s: "\u0001ctrl\u001f", f: -0.000001 },
  { b: 1e20, i: -2147483649, s: "x".repeat(300), l: ["y".repeat(100), "z"] },
  { b: "-999999999999999", f: "  7 ", s: "日本語のテキスト" },
];
const STAMPS = [
  "2026-11-26T18:06:17.123456Z",
  "1999-12-31T23:59:59.999999Z",
  "1969-07-20T20:17:40.000001Z",
  "2000-01-01T00:00:00Z",
];

function asJson(ipc: Uint8Array): unknown {
  const t = arrow.tableFromIPC(ipc);
  return JSON.parse(JSON.stringify(t.toArray(), (_k, v: unknown) => (typeof v === "bigint" ? `${v}n` : v)));
}

async function copyBytes(b: Backend, sql: string, params: unknown[] = []): Promise<Uint8Array[]> {
  const chunks: Uint8Array[] = [];
  for await (const c of b.db.copyOut?.(sql, params) ?? []) chunks.push(c);
  return chunks;
}

describeBackends(
  "parquet COPY path",
  (backend) => {
    beforeAll(async () => {
      const { db } = backend();
      await db.exec(`CREATE TABLE copy_src (identifier text, payload_type text, parent_identifier text, license text, access_level text,
        derived_from text[], payload jsonb, created_at timestamptz, updated_at timestamptz, version bigint)`);
      for (let i = 0; i < PAYLOADS.length * 3; i++) {
        await db.query(`INSERT INTO copy_src VALUES ($1, 'x', $2, $3, 'internal', $4, $5, $6, $7, $8)`, [
          `id-${String(i).padStart(3, "0")}`,
          i % 2 ? null : `parent-"${i}"`,
          i % 3 ? "MIT" : null,
          i % 4 === 0 ? [] : i % 4 === 1 ? ["a", 'b"c', "ü"] : i % 4 === 2 ? ["x", null, ""] : null,
          JSON.stringify(PAYLOADS[i % PAYLOADS.length]).replace('"BIG"', "12345678901234567"),
          STAMPS[i % STAMPS.length],
          STAMPS[(i + 1) % STAMPS.length],
          i % 5 === 0 ? "1099511627776" : String(i + 1),
        ]);
      }
    });

    it("builds the row path's Arrow batch, value for value and byte for byte", async () => {
      const b = backend();
      const { rows } = await b.db.query<QueryRow>(`SELECT ${resourceColumns("r")} FROM copy_src r ORDER BY identifier`);
      expect(rows).toHaveLength(PAYLOADS.length * 3);
      const fromRows = rowsToIpc(arrowSchema(columns), columns, rows);
      const split = new CopyRowSplitter(columns.length, 1000);
      for (const c of await copyBytes(b, `SELECT ${exportSelect(columns)} FROM copy_src r ORDER BY identifier`))
        expect(split.push(c)).toEqual([]);
      const group = split.end();
      expect(group?.rows).toBe(rows.length);
      const fromCopy = copyTuplesToIpc(arrow, group?.data ?? new Uint8Array(), group?.rows ?? 0, wire);
      const want = asJson(fromRows) as Record<string, unknown>[];
      // A few values the model says, so that both paths agreeing on a wrong value fails too.
      expect(want[1]?.s).toBe('quo"te\\back\nline ü 😀');
      expect(want[2]?.b).toBe("12345678901234568n");
      expect(want[4]?.i).toBe(3);
      expect(want[5]?.i).toBe(1);
      expect(want[5]?.b).toBe("12n");
      // Arrow hands microsecond timestamps out as fractional milliseconds.
      expect(want[1]?.created_at).toBe(946684799999999 / 1000);
      expect(want[2]?.created_at).toBe(-14182940000 + 0.000001 * 1000);
      expect(asJson(fromCopy)).toEqual(want);
      expect(Buffer.from(fromCopy).equals(Buffer.from(fromRows))).toBe(true);
    });

    it("cuts the stream into the same row groups wherever its pieces end", async () => {
      const b = backend();
      const whole = Buffer.concat(
        await copyBytes(b, `SELECT ${exportSelect(columns)} FROM copy_src r ORDER BY identifier`),
      );
      const cut = (sizes: (i: number) => number) => {
        const sp = new CopyRowSplitter(columns.length, 5);
        const groups: { data: Uint8Array; rows: number }[] = [];
        for (let at = 0, i = 0; at < whole.length; i++) {
          const n = sizes(i);
          groups.push(...sp.push(whole.subarray(at, at + n)));
          at += n;
        }
        const last = sp.end();
        if (last) groups.push(last);
        return groups.map((g) => ({ rows: g.rows, data: Buffer.from(g.data).toString("hex") }));
      };
      const once = cut(() => whole.length);
      expect(once.map((g) => g.rows)).toEqual([5, 5, 5, 5, 4]);
      expect(cut(() => 1)).toEqual(once);
      expect(cut((i) => 1 + ((i * 7919) % 23))).toEqual(once);
      // Every row group is rows the worker reads back whole.
      for (const g of once)
        expect(() => copyTuplesToIpc(arrow, Buffer.from(g.data, "hex"), g.rows, wire)).not.toThrow();
      const noTrailer = new CopyRowSplitter(columns.length, 5);
      noTrailer.push(whole.subarray(0, whole.length - 2));
      expect(() => noTrailer.end()).toThrow(CopyFormatError);
    });

    it("reads inlined parameters as bound ones", async () => {
      const b = backend();
      const sql = `SELECT $1::text AS a, array_to_string($2::text[], '|', '<null>') AS b, ($3::int8)::text AS c, ($4::jsonb)::text AS d,
        '$1' AS e, ($5::text IS NULL)::text AS f, $6::timestamptz::text AS g`;
      const params = [
        'it\'s \\ "q" ü',
        ['a"b', null, "c\\d", "", "{x}"],
        "-9007199254740993",
        JSON.stringify({ "k'": ["\\", "$1"] }),
        null,
        "2026-01-02T03:04:05.678901Z",
      ];
      const { rows } = await b.db.query<Record<string, string>>(sql, params);
      const sp = new CopyRowSplitter(7, 10);
      for (const c of await copyBytes(b, sql, params)) sp.push(c);
      const g = sp.end();
      const text: WireColumn[] = ["a", "b", "c", "d", "e", "f", "g"].map((name) => ({
        name,
        kind: "utf8",
        wire: "text",
      }));
      const got = arrow
        .tableFromIPC(copyTuplesToIpc(arrow, g?.data ?? new Uint8Array(), g?.rows ?? 0, text))
        .toArray()[0] as Record<string, unknown>;
      expect(rows[0]?.a).toBe('it\'s \\ "q" ü');
      expect(rows[0]?.e).toBe("$1");
      for (const k of ["a", "b", "c", "d", "e", "f", "g"]) expect(got[k]).toBe(rows[0]?.[k]);
    });

    it("ends a COPY that sends nothing for the statement timeout, and one whose reader stops, without losing the connection's pool", async () => {
      const b = backend();
      const db = await openDatabase({ databaseUrl: b.url, poolSize: 1, statementTimeoutMs: 400 });
      try {
        // One statement longer than the timeout, its rows coming steadily: not ended. (PostgreSQL
        // sends COPY data in 8 kB flushes: rows of 9,000 bytes go out one by one.)
        const steady = await copyBytes(
          { ...b, db },
          "SELECT repeat('x', 9000), pg_sleep(0.1)::text FROM generate_series(1, 8) g",
        );
        const sp = new CopyRowSplitter(2, 100);
        for (const c of steady) sp.push(c);
        expect(sp.end()?.rows).toBe(8);
        // Nothing for 2 s: ended by the watchdog between 0.4 s and 2 s.
        const t0 = performance.now();
        await expect(copyBytes({ ...b, db }, "SELECT pg_sleep(2)::text")).rejects.toThrow(/unavailable|internal/);
        const took = performance.now() - t0;
        expect(took).toBeGreaterThanOrEqual(400);
        expect(took).toBeLessThan(1900);
        // A reader that stops after its first piece drops the connection; the pool's one slot serves again.
        for await (const piece of db.copyOut?.("SELECT repeat('x', 1000) FROM generate_series(1, 100000)", []) ?? []) {
          expect(piece.length).toBeGreaterThan(0);
          break;
        }
        expect((await db.query<{ n: number }>("SELECT 1 AS n")).rows[0]?.n).toBe(1);
      } finally {
        await db.close();
      }
    });
  },
  ["postgres"],
);
