// MAX_PREVIEW_BYTES (docs/contract/16-limits.md): a parquet preview reads at most that
// many bytes of the object, footer included; a forged footer length is 400
// invalid_argument without the bytes it names being read.
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { previewParquet, type ObjectStorage } from "../../src/storage/index.js";
import { writeFixture } from "./parquet-fixture.js";

/** An object store of one object that counts the bytes it hands out. */
function oneObject(bytes: Uint8Array): { storage: ObjectStorage; read: () => number } {
  let read = 0;
  const storage = {
    bucket: "b",
    headObject: () => Promise.resolve({ size: bytes.length, etag: undefined }),
    readRange: (_key: string, start: number, end: number) => {
      read += end - start;
      return Promise.resolve(bytes.slice(start, end));
    },
  } as unknown as ObjectStorage;
  return { storage, read: () => read };
}

/** An object of `size` bytes that ends in a footer length claiming `claimed` bytes. */
function forged(size: number, claimed: number): Uint8Array {
  const bytes = new Uint8Array(size);
  bytes.set(new TextEncoder().encode("PAR1"), 0);
  new DataView(bytes.buffer).setUint32(size - 8, claimed, true);
  bytes.set(new TextEncoder().encode("PAR1"), size - 4);
  return bytes;
}

async function refusal(p: Promise<unknown>): Promise<ConnectError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  return err as ConnectError;
}

describe("MAX_PREVIEW_BYTES", () => {
  it("refuses a footer length larger than the limit before reading it", async () => {
    const { storage, read } = oneObject(forged(1 << 20, 900_000));
    const err = await refusal(previewParquet(storage, "k", 0, 10, 4096));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.message).toContain("MAX_PREVIEW_BYTES");
    expect(read()).toBeLessThanOrEqual(4096);
  });

  it("refuses a footer length larger than the object as not parquet, reading only its tail", async () => {
    const { storage, read } = oneObject(forged(2048, 2_000_000_000));
    const err = await refusal(previewParquet(storage, "k", 0, 10, 1 << 30));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(read()).toBeLessThanOrEqual(8);
  });

  it("stops reading column chunks once the limit is reached", async () => {
    const fixture = writeFixture(20_000, 2_000);
    const { storage, read } = oneObject(fixture.bytes);
    const limit = Math.min(fixture.bytes.length - 1, 16 * 1024);
    const err = await refusal(previewParquet(storage, "k", 0, 20_000, limit));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.message).toContain("MAX_PREVIEW_BYTES");
    expect(read()).toBeLessThanOrEqual(limit);
    // With room for the object (some ranges overlap the footer fetch) the same preview answers.
    const ok = oneObject(fixture.bytes);
    const preview = await previewParquet(ok.storage, "k", 0, 20_000, 2 * fixture.bytes.length);
    expect(preview.returnedRows).toBe(20_000);
  });
});
