import { describe, expect, it } from "vitest";
import { int64Buffer, stampMicrosExact, stampToMicros, timestampBuffer, utf8Buffers } from "../../src/parquet/index.js";

const enc = new TextEncoder();

/** Each value read back from the buffers. */
function decode(b: { offsets: Int32Array; data: Uint8Array }): string[] {
  const dec = new TextDecoder();
  return Array.from({ length: b.offsets.length - 1 }, (_, i) =>
    dec.decode(b.data.subarray(b.offsets[i], b.offsets[i + 1])),
  );
}

describe("utf8Buffers", () => {
  it("lays ASCII values back to back with byte offsets", () => {
    const b = utf8Buffers(["ab", "", "cde", "f"]);
    expect(Array.from(b.offsets)).toEqual([0, 2, 2, 5, 6]);
    expect(Buffer.from(b.data).toString("latin1")).toBe("abcdef");
  });

  it("gives null and empty values no bytes", () => {
    const b = utf8Buffers([null, "x", null, "", null]);
    expect(Array.from(b.offsets)).toEqual([0, 0, 1, 1, 1, 1]);
    expect(b.data.length).toBe(1);
    expect(utf8Buffers([]).offsets).toEqual(new Int32Array([0]));
    expect(utf8Buffers([null, ""]).data.length).toBe(0);
  });

  it("counts multi-byte characters in bytes, not UTF-16 units", () => {
    const values = ["é", "a", "日本語", "😀x", "plain", "Ωmega"];
    const b = utf8Buffers(values);
    const lengths = values.map((v) => enc.encode(v).length);
    expect(Array.from(b.offsets)).toEqual(lengths.reduce((acc, n) => [...acc, (acc.at(-1) ?? 0) + n], [0]));
    expect(decode(b)).toEqual(values);
    expect(Buffer.compare(Buffer.from(b.data), Buffer.from(enc.encode(values.join(""))))).toBe(0);
  });

  it("encodes lone surrogates per value, as TextEncoder does", () => {
    // Joined, "\ud83d" + "\ude00" would make one 4-byte emoji; apart each is U+FFFD.
    const values = ["a\ud83d", "\ude00b"];
    const b = utf8Buffers(values);
    const expected = values.map((v) => enc.encode(v));
    expect(Array.from(b.offsets)).toEqual([0, expected[0]!.length, expected[0]!.length + expected[1]!.length]);
    expect(Array.from(b.data)).toEqual([...expected[0]!, ...expected[1]!]);
  });
});

describe("timestamps", () => {
  it("turns stamps into exact microseconds across dates, leap days and the epoch", () => {
    const stamps = [
      "2026-11-21T23:05:01.123456Z",
      "1970-01-01T00:00:00.000000Z",
      "1969-12-31T23:59:59.999999Z",
      "2000-02-29T12:00:00.000001Z",
      "2024-03-01T00:00:00.500000Z",
      "1900-03-01T01:02:03.040506Z",
      "2255-06-05T23:47:34.740991Z",
      "2255-06-05T23:47:34.740992Z",
      "9999-12-31T23:59:59.999999Z",
    ];
    for (const s of stamps) {
      const ms = BigInt(Date.parse(`${s.slice(0, 19)}Z`));
      const expected = ms * 1000n + BigInt(s.slice(20, 26));
      // Past 2^53 microseconds (after 2255) a Number cannot hold the value: the exact parse declines.
      if (expected <= BigInt(Number.MAX_SAFE_INTEGER)) expect(stampMicrosExact(s), s).toBe(Number(expected));
      else expect(stampMicrosExact(s), s).toBeNaN();
      expect(stampToMicros(s), s).toBe(expected);
    }
    const buf = timestampBuffer([...stamps, null]);
    expect(Array.from(buf)).toEqual([...stamps.map((s) => stampToMicros(s)), 0n]);
  });

  it("agrees with Date on a spread of random instants", () => {
    for (let i = 0; i < 2000; i++) {
      const ms = Math.floor((Math.random() - 0.3) * 8e12);
      const us = Math.floor(Math.random() * 1000);
      const s = `${new Date(ms).toISOString().slice(0, 23)}${String(us).padStart(3, "0")}Z`;
      expect(stampMicrosExact(s), s).toBe(ms * 1000 + us);
    }
  });

  it("rejects other shapes, and the buffer still reads offsets the old way", () => {
    expect(stampMicrosExact("2026-11-21T23:05:01Z")).toBeNaN();
    expect(stampMicrosExact("2026-11-21 23:05:01.123456Z")).toBeNaN();
    expect(stampMicrosExact("2026-13-21T23:05:01.123456Z")).toBeNaN();
    expect(stampMicrosExact("2026-11-21T23:05:01.12345xZ")).toBeNaN();
    const withOffset = "2026-11-21T23:05:01.123456+00:00";
    expect(timestampBuffer([withOffset])[0]).toBe(BigInt(Date.parse("2026-11-21T23:05:01Z")) * 1000n + 123456n);
    expect(() => timestampBuffer(["not a stamp"])).toThrow();
  });
});

describe("int64Buffer", () => {
  it("holds decimal strings, numbers and bigints exactly, nulls as 0", () => {
    const values = [
      "0",
      "1",
      "-1",
      "42",
      "-4294967296",
      "4294967297",
      "999999999999999",
      "-999999999999999",
      "9007199254740993",
      "-9223372036854775808",
      "9223372036854775807",
      7,
      -(2 ** 40),
      2 ** 53 - 1,
      5n,
      null,
    ];
    expect(Array.from(int64Buffer(values))).toEqual(values.map((v) => (v === null ? 0n : BigInt(v))));
  });

  it("refuses what is not an integer, as BigInt does", () => {
    expect(() => int64Buffer(["1.5"])).toThrow();
    expect(() => int64Buffer(["1e3"])).toThrow();
    expect(() => int64Buffer([1.5])).toThrow();
    expect(() => int64Buffer(["9223372036854775808x"])).toThrow();
  });
});
