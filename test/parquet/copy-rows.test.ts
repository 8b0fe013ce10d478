// The splitter of a COPY-fed export gathers each row group in a buffer of
// its own, taken from the buffers it is given (the export recycles the ones
// its workers hand back), so a long export does not leave a buffer per row
// group for the garbage collector.
import { describe, expect, it } from "vitest";
import { CopyRowSplitter, type GroupBuffers } from "../../src/parquet/index.js";

/** A binary COPY stream of `rows` rows of two text fields. */
function copyStream(rows: number, vary = true): { stream: Uint8Array; tuples: Uint8Array[] } {
  const header = [0x50, 0x47, 0x43, 0x4f, 0x50, 0x59, 0x0a, 0xff, 0x0d, 0x0a, 0x00, 0, 0, 0, 0, 0, 0, 0, 0];
  const tuples: Uint8Array[] = [];
  for (let r = 0; r < rows; r++) {
    const a = Buffer.from(`row-${r}`);
    const b = Buffer.from("x".repeat(vary ? r % 7 : 3));
    const t = Buffer.alloc(2 + 4 + a.length + 4 + b.length);
    t.writeInt16BE(2, 0);
    t.writeInt32BE(a.length, 2);
    a.copy(t, 6);
    t.writeInt32BE(b.length, 6 + a.length);
    b.copy(t, 10 + a.length);
    tuples.push(t);
  }
  return { stream: Buffer.concat([Buffer.from(header), ...tuples, Buffer.from([0xff, 0xff])]), tuples };
}

describe("CopyRowSplitter", () => {
  it("gathers each row group in a buffer of its own from the given buffers, and gives back only the ones it outgrew", () => {
    const { stream, tuples } = copyStream(23);
    const given = new Set<ArrayBuffer>();
    const freed: Uint8Array[] = [];
    const buffers: GroupBuffers = {
      alloc(_least, size) {
        const b = new Uint8Array(size);
        given.add(b.buffer);
        return b;
      },
      free: (b) => freed.push(b),
    };
    const sp = new CopyRowSplitter(2, 5, buffers);
    const groups = [];
    for (let at = 0, i = 0; at < stream.length; i++) {
      const n = 1 + ((i * 31) % 17);
      groups.push(...sp.push(stream.subarray(at, at + n)));
      at += n;
    }
    const last = sp.end();
    if (last) groups.push(last);
    expect(groups.map((g) => g.rows)).toEqual([5, 5, 5, 5, 3]);
    groups.forEach((g, k) =>
      expect(Buffer.from(g.data).equals(Buffer.concat(tuples.slice(k * 5, k * 5 + 5)))).toBe(true),
    );
    const owned = groups.map((g) => g.data.buffer as ArrayBuffer);
    for (const b of owned) expect(given.has(b)).toBe(true);
    expect(new Set(owned).size).toBe(groups.length);
    for (const f of freed) expect(owned).not.toContain(f.buffer);
  });

  it("takes a freed buffer again for a later group", () => {
    // Rows of one size, as a long export's row groups are within a few per cent.
    const { stream } = copyStream(80, false);
    const spare: Uint8Array[] = [];
    let made = 0;
    const buffers: GroupBuffers = {
      alloc(least, size) {
        expect(size).toBeGreaterThanOrEqual(least);
        const at = spare.findIndex((b) => b.length >= least);
        if (at >= 0) return spare.splice(at, 1)[0] as Uint8Array;
        made += 1;
        return new Uint8Array(size);
      },
      free: (b) => spare.push(b),
    };
    const sp = new CopyRowSplitter(2, 4, buffers);
    let groups = 0;
    for (let at = 0; at < stream.length; at += 64) {
      for (const g of sp.push(stream.subarray(at, at + 64))) {
        groups += 1;
        // The consumer is done with the group (as a worker hands its buffer back).
        buffers.free(new Uint8Array(g.data.buffer));
      }
    }
    expect(sp.end()).toBeUndefined();
    expect(groups).toBe(20);
    // Two buffers circulate, plus the first ones outgrown while the identifiers grew a digit.
    expect(made).toBeLessThanOrEqual(4);
  });
});
