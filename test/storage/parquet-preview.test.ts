import { PutObjectCommand } from "@aws-sdk/client-s3";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startTestS3 } from "../support/s3.js";
import type { TestS3 } from "../support/s3.js";
import { storageClient } from "./client.js";
import type { StorageClient } from "./client.js";
import { writeAwkwardFixture, writeFixture } from "./parquet-fixture.js";
import type { Fixture } from "./parquet-fixture.js";

let s3: TestS3;
let client: StorageClient;
let fixture: Fixture;
/** Body bytes of every GET the storage client made since the last reset. */
let bytesFetched = 0;
let getRequests = 0;

const BIG = "big/data.parquet";

async function put(key: string, body: Uint8Array | string): Promise<void> {
  await s3.storage.client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: key, Body: body }));
}

function path(key: string): string {
  return `s3://${s3.bucket}/${key}`;
}

function expectedRow(i: number): Record<string, unknown> {
  const id = fixture.ids[i]!;
  const micros = fixture.micros[i]!;
  const seconds = micros / 1_000_000n;
  const fraction = (micros % 1_000_000n).toString().padStart(6, "0");
  const iso = new Date(Number(seconds) * 1000).toISOString().slice(0, 19);
  return {
    // A JSON number only when a double holds the int64 exactly.
    id: BigInt(Number(id)) === id ? Number(id) : id.toString(),
    score: fixture.scores[i],
    ts: `${iso}.${fraction}Z`,
    day: new Date(fixture.days[i]! * 86_400_000).toISOString().slice(0, 10),
    name: fixture.name(i),
    blob: Buffer.from(fixture.blob(i)).toString("base64"),
  };
}

async function rejection(promise: Promise<unknown>): Promise<ConnectError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  return err as ConnectError;
}

beforeAll(async () => {
  s3 = await startTestS3();
  fixture = writeFixture(200_000, 25_000);
  await put(BIG, fixture.bytes);
  s3.storage.client.middlewareStack.add(
    (next) => async (args) => {
      const out = await next(args);
      const request = args.request as { method?: string };
      const response = out.response as { headers?: Record<string, string> };
      if (request.method === "GET") {
        getRequests++;
        bytesFetched += Number(response.headers?.["content-length"] ?? 0);
      }
      return out;
    },
    { step: "deserialize", name: "countBytes" },
  );
  client = storageClient({ storage: s3.storage, limits: { maxBatchItems: 100 }, presignExpiresSeconds: 600 });
});

afterAll(async () => {
  await s3?.stop();
});

describe("ParquetPreview", () => {
  test("a 100-row page of a 20 MB file reads under 5% of it, with ranged GETs", async () => {
    expect(fixture.bytes.byteLength).toBeGreaterThan(20 * 1024 * 1024);
    bytesFetched = 0;
    getRequests = 0;
    const offset = 123_456;
    const res = await client.parquetPreview({ path: path(BIG), offset: BigInt(offset) });

    expect(res.totalRows).toBe(200_000n);
    expect(res.returnedRows).toBe(100n);
    expect(res.offset).toBe(BigInt(offset));
    expect(res.data).toHaveLength(100);
    res.data.forEach((row, k) => expect(row).toEqual(expectedRow(offset + k)));

    expect(getRequests).toBeGreaterThan(1);
    expect(bytesFetched).toBeGreaterThan(0);
    expect(bytesFetched).toBeLessThan(fixture.bytes.byteLength * 0.05);
  });

  test("columns and schema describe the file; the default page is the first 100 rows", async () => {
    const res = await client.parquetPreview({ path: path(BIG) });
    expect(res.columns).toEqual(["id", "score", "ts", "day", "name", "blob"]);
    expect(res.schema.map((c) => ({ name: c.name, type: c.type }))).toEqual([
      { name: "id", type: "INT64" },
      { name: "score", type: "DOUBLE" },
      { name: "ts", type: "TIMESTAMP(MICROS, UTC)" },
      { name: "day", type: "DATE" },
      { name: "name", type: "STRING" },
      { name: "blob", type: "BYTE_ARRAY" },
    ]);
    expect(res.offset).toBe(0n);
    expect(res.data).toHaveLength(100);
    expect(res.data[0]).toEqual(expectedRow(0));
    // Row 0 has an id above 2^53 (a string), row 1 a small one (a number).
    expect(typeof res.data[0]!.id).toBe("string");
    expect(typeof res.data[1]!.id).toBe("number");
  });

  test("a page that crosses a row group boundary and one at the end of the file", async () => {
    const across = await client.parquetPreview({ path: path(BIG), offset: 24_990n, limit: 20 });
    expect(across.data).toEqual(Array.from({ length: 20 }, (_, k) => expectedRow(24_990 + k)));

    const tail = await client.parquetPreview({ path: path(BIG), offset: 199_995n, limit: 100 });
    expect(tail.returnedRows).toBe(5n);
    expect(tail.data).toEqual(Array.from({ length: 5 }, (_, k) => expectedRow(199_995 + k)));

    const past = await client.parquetPreview({ path: path(BIG), offset: 500_000n });
    expect(past.returnedRows).toBe(0n);
    expect(past.data).toEqual([]);
    expect(past.totalRows).toBe(200_000n);
  });

  test("limit is 1 to 10,000 and offset not negative", async () => {
    for (const limit of [0, -1, 10_001]) {
      expect((await rejection(client.parquetPreview({ path: path(BIG), limit }))).code).toBe(Code.InvalidArgument);
    }
    expect((await rejection(client.parquetPreview({ path: path(BIG), offset: -1n }))).code).toBe(Code.InvalidArgument);
    const max = await client.parquetPreview({ path: path(BIG), limit: 10_000, offset: 1n });
    expect(max.returnedRows).toBe(10_000n);
    expect(max.data[9_999]).toEqual(expectedRow(10_000));
  });

  test("a missing object is not_found, an object that is not parquet invalid_argument", async () => {
    expect((await rejection(client.parquetPreview({ path: path("nope/missing.parquet") }))).code).toBe(Code.NotFound);

    await put("junk/text.parquet", "this is plain text and certainly not a parquet file\n".repeat(50));
    await put("junk/tiny.parquet", "PAR1");
    const truncated = fixture.bytes.subarray(0, fixture.bytes.byteLength - 100);
    await put("junk/truncated.parquet", truncated);
    for (const key of ["junk/text.parquet", "junk/tiny.parquet", "junk/truncated.parquet"]) {
      const err = await rejection(client.parquetPreview({ path: path(key) }));
      expect(err.code).toBe(Code.InvalidArgument);
    }
  });

  test("nested values, nulls, non-finite doubles and odd timestamps come out as JSON", async () => {
    await put("awkward/values.parquet", writeAwkwardFixture());
    const json = storageClient(
      { storage: s3.storage, limits: { maxBatchItems: 100 }, presignExpiresSeconds: 600 },
      { json: true },
    );
    const res = await json.parquetPreview({ path: path("awkward/values.parquet") });
    expect(res.columns).toEqual(["tags", "point", "ratio", "label", "ms", "ns"]);
    expect(res.schema.map((c) => c.type)).toEqual([
      "LIST",
      "STRUCT",
      "DOUBLE",
      "STRING",
      "TIMESTAMP(MILLIS, UTC)",
      "TIMESTAMP(NANOS, UTC)",
    ]);
    expect(res.data).toEqual([
      {
        tags: [1, 2],
        point: { a: "x", b: 1.5 },
        ratio: "NaN",
        label: "x",
        ms: "1969-12-31T23:59:58.500000Z",
        ns: "2023-11-14T22:13:20.123456789Z",
      },
      {
        tags: [],
        point: null,
        ratio: "Infinity",
        label: null,
        ms: "1970-01-01T00:00:00.000000Z",
        ns: "1969-12-31T23:59:59.999999999Z",
      },
      {
        tags: null,
        point: { a: null, b: "NaN" },
        ratio: -0.5,
        label: "z",
        ms: "+010000-01-01T00:00:00.000000Z",
        ns: "1970-01-01T00:00:00.000000000Z",
      },
    ]);
  });

  test("a path outside the bucket or with unsafe segments is invalid_argument", async () => {
    for (const p of ["s3://other-bucket/big/data.parquet", "big/data.parquet", path("big/../big/data.parquet"), ""]) {
      expect((await rejection(client.parquetPreview({ path: p }))).code).toBe(Code.InvalidArgument);
    }
  });
});
