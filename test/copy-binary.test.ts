// The one reader of PostgreSQL's binary COPY format (src/copy-binary.ts),
// which the dump's version encoder, the parquet export's row splitter and
// its encoder workers all read through: the header with its extension,
// rows cut anywhere, nulls, the trailer, and a row of other fields refused.
import { describe, expect, it } from "vitest";
import {
  COPY_PARTIAL,
  COPY_TRAILER,
  CopyFormatError,
  copyHeaderEnd,
  readCopyRow,
  skipCopyRow,
} from "../src/copy-binary.js";

const SIGNATURE = Buffer.from("PGCOPY\n\xff\r\n\0", "latin1");

function header(extension: Buffer = Buffer.alloc(0)): Buffer {
  const fixed = Buffer.alloc(8);
  fixed.writeInt32BE(extension.length, 4);
  return Buffer.concat([SIGNATURE, fixed, extension]);
}

/** One row: each value's bytes, or null. */
function row(values: readonly (Buffer | null)[]): Buffer {
  const parts: Buffer[] = [Buffer.from([values.length >> 8, values.length & 0xff])];
  for (const v of values) {
    const len = Buffer.alloc(4);
    len.writeInt32BE(v === null ? -1 : v.length);
    parts.push(len);
    if (v !== null) parts.push(v);
  }
  return Buffer.concat(parts);
}

const TRAILER = Buffer.from([0xff, 0xff]);

describe("the binary COPY reader", () => {
  it("finds the rows after the header and its extension, and waits for a header not yet whole", () => {
    const h = header(Buffer.from("ext!"));
    expect(copyHeaderEnd(h, h.length)).toBe(h.length);
    for (let cut = 0; cut < h.length; cut++) expect(copyHeaderEnd(h, cut)).toBe(COPY_PARTIAL);
    const text = Buffer.from("identifier\tversion\n".padEnd(40, "x"));
    expect(() => copyHeaderEnd(text, text.length)).toThrow(CopyFormatError);
  });

  it("reads each field's place, nulls as -1, and answers partial for a row cut at any byte", () => {
    const r = row([Buffer.from("abc"), null, Buffer.alloc(0), Buffer.from([1, 2, 3, 4, 5, 6, 7, 8])]);
    const data = Buffer.concat([Buffer.from([9, 9]), r, TRAILER]);
    const at = new Int32Array(8);
    const len = new Int32Array(8);
    const end = readCopyRow(data, 2, data.length, 4, at, len, 4);
    expect(end).toBe(2 + r.length);
    expect([...len.subarray(4)]).toEqual([3, -1, 0, 8]);
    expect(data.subarray(at[4], at[4]! + len[4]!).toString()).toBe("abc");
    expect(at[5]).toBe(-1);
    expect([...data.subarray(at[7], at[7]! + len[7]!)]).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(skipCopyRow(data, 2, data.length, 4)).toBe(end);
    for (let cut = 2; cut < 2 + r.length; cut++) {
      expect(readCopyRow(data, 2, cut, 4, at, len)).toBe(COPY_PARTIAL);
      expect(skipCopyRow(data, 2, cut, 4)).toBe(COPY_PARTIAL);
    }
    expect(readCopyRow(data, end, data.length, 4, at, len)).toBe(COPY_TRAILER);
    expect(skipCopyRow(data, end, data.length, 4)).toBe(COPY_TRAILER);
  });

  it("refuses a row of other fields than the statement's, saying how many", () => {
    const data = row([Buffer.from("a"), Buffer.from("b")]);
    expect(() => skipCopyRow(data, 0, data.length, 3)).toThrow(/has 2 fields, expected 3/);
    expect(() => readCopyRow(data, 0, data.length, 1, new Int32Array(1), new Int32Array(1))).toThrow(CopyFormatError);
  });
});
