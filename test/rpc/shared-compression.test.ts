// sharedCompression (src/rpc/shared-compression.ts): equal inputs, even in
// distinct buffers, get one compression and the same output; different
// inputs of the same length do not; what it keeps is bounded; a failed
// compression is tried again; decompression is the base's.
import { gunzipSync } from "node:zlib";
import { compressionGzip } from "@connectrpc/connect-node";
import type { Compression } from "@connectrpc/connect/protocol";
import { describe, expect, it } from "vitest";
import { sharedCompression } from "../../src/rpc/index.js";

/** A base that counts its calls and answers the input reversed (or fails while `failing`). */
function countingBase(): Compression & { calls: number; failing: boolean } {
  const base = {
    name: "test",
    calls: 0,
    failing: false,
    compress(bytes: Uint8Array): Promise<Uint8Array<ArrayBuffer>> {
      base.calls += 1;
      return base.failing ? Promise.reject(new Error("no")) : Promise.resolve(Uint8Array.from(bytes).reverse());
    },
    decompress: (bytes: Uint8Array) => Promise.resolve(Uint8Array.from(bytes).reverse()),
  };
  return base;
}

const bytesOf = (s: string) => new Uint8Array(Buffer.from(s));

describe("sharedCompression", () => {
  it("compresses equal inputs once, also when they arrive together and in different buffers", async () => {
    const base = countingBase();
    const c = sharedCompression(base);
    const outs = await Promise.all([
      c.compress(bytesOf("the same message")),
      c.compress(bytesOf("the same message")),
      c.compress(bytesOf("the same message")),
    ]);
    expect(base.calls).toBe(1);
    expect(outs[1]).toBe(outs[0]);
    expect(Buffer.from(outs[0]).toString()).toBe("egassem emas eht");
  });

  it("tells inputs of the same length apart by their bytes", async () => {
    const base = countingBase();
    const c = sharedCompression(base);
    const a = await c.compress(bytesOf("message A"));
    const b = await c.compress(bytesOf("message B"));
    expect(base.calls).toBe(2);
    expect(Buffer.from(a).toString()).toBe("A egassem");
    expect(Buffer.from(b).toString()).toBe("B egassem");
  });

  it("keeps at most maxEntries inputs and maxBytes of them, the newest always", async () => {
    const base = countingBase();
    const c = sharedCompression(base, { maxEntries: 2, maxBytes: 10 });
    for (const s of ["aaaa", "bbbb", "cccc"]) await c.compress(bytesOf(s));
    await c.compress(bytesOf("aaaa")); // dropped by count: compressed again
    expect(base.calls).toBe(4);
    await c.compress(bytesOf("aaaa")); // kept
    expect(base.calls).toBe(4);
    await c.compress(bytesOf("x".repeat(20))); // alone above maxBytes: kept, everything older dropped
    await c.compress(bytesOf("x".repeat(20)));
    await c.compress(bytesOf("aaaa"));
    expect(base.calls).toBe(6);
  });

  it("keeps its own copy of an input: a caller that reuses its buffer gets no stale output", async () => {
    const base = countingBase();
    const c = sharedCompression(base);
    const buf = bytesOf("first message");
    await c.compress(buf);
    buf.set(bytesOf("other message"));
    expect(Buffer.from(await c.compress(bytesOf("other message"))).toString()).toBe("egassem rehto");
    expect(base.calls).toBe(2);
  });

  it("does not keep a failed compression", async () => {
    const base = countingBase();
    const c = sharedCompression(base);
    base.failing = true;
    await expect(c.compress(bytesOf("fails once"))).rejects.toThrow("no");
    base.failing = false;
    expect(Buffer.from(await c.compress(bytesOf("fails once"))).toString()).toBe("ecno sliaf");
    expect(base.calls).toBe(2);
  });

  it("takes the base's name and decompression; over gzip the output is gzip of the input", async () => {
    const c = sharedCompression(compressionGzip);
    expect(c.name).toBe("gzip");
    const input = bytesOf("z".repeat(5000));
    const out = await c.compress(input);
    expect(Buffer.from(gunzipSync(out)).equals(Buffer.from(input))).toBe(true);
    expect(Buffer.from(await c.decompress(out, 1 << 20)).equals(Buffer.from(input))).toBe(true);
  });
});
