import { createServer } from "node:net";
import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { StorageService as V1StorageService } from "../../gen/resourcestore/v1/storage_service_pb.js";
import { createStorageService } from "../../src/rpc/index.js";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { EMBEDDED_CREDENTIALS, connectObjectStorage } from "../../src/storage/index.js";
import { startTestS3 } from "../support/s3.js";
import type { TestS3 } from "../support/s3.js";
import { storageClient } from "./client.js";
import type { StorageClient } from "./client.js";
import { routerAs } from "../support/caller.js";

const MAX_ITEMS = 5;
const EXPIRES = 900;
const UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";

let s3: TestS3;
let client: StorageClient;

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

async function rejection(promise: Promise<unknown>): Promise<ConnectError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  return err as ConnectError;
}

async function expectCode(promise: Promise<unknown>, code: Code): Promise<void> {
  expect(Code[(await rejection(promise)).code]).toBe(Code[code]);
}

async function upload(url: string, body: string | Uint8Array): Promise<void> {
  const res = await fetch(url, { method: "PUT", body });
  expect(res.status).toBe(200);
}

async function download(url: string): Promise<Uint8Array> {
  const res = await fetch(url);
  expect(res.status).toBe(200);
  return new Uint8Array(await res.arrayBuffer());
}

beforeAll(async () => {
  s3 = await startTestS3({ listPageSize: 2 });
  client = storageClient({ storage: s3.storage, limits: { maxBatchItems: MAX_ITEMS }, presignExpiresSeconds: EXPIRES });
});

afterAll(async () => {
  await s3?.stop();
});

describe("Config", () => {
  test("answers the endpoint clients use and the bucket", async () => {
    const res = await client.config({});
    expect(res.s3Endpoint).toBe(s3.endpoint);
    expect(res.s3Bucket).toBe(s3.bucket);
  });
});

describe("Presign", () => {
  test("an upload URL takes the bytes that a download URL of its path gives back", async () => {
    const filename = "scan 01 ü+%#?.nii.gz";
    const up = await client.presign({ direction: "upload", group: "site-a/cohort_1.x", filename });
    expect(up.path).toMatch(new RegExp(`^s3://${s3.bucket}/site-a/cohort_1\\.x/${UUID}/${escapeRegExp(filename)}$`));
    expect(new URL(up.url).origin).toBe(s3.endpoint);
    expect(new URL(up.url).searchParams.get("X-Amz-Expires")).toBe(String(EXPIRES));

    const body = new Uint8Array(Array.from({ length: 4096 }, (_, i) => (i * 31) % 256));
    await upload(up.url, body);
    const down = await client.presign({ direction: "download", path: up.path });
    expect(down.path).toBeUndefined();
    expect(await download(down.url)).toEqual(body);
  });

  test("two uploads of one name get different keys", async () => {
    const a = await client.presign({ direction: "upload", group: "g", filename: "same.txt" });
    const b = await client.presign({ direction: "upload", group: "g", filename: "same.txt" });
    expect(a.path).not.toBe(b.path);
  });

  test("unsafe groups, filenames and paths are invalid_argument", async () => {
    const badGroups = ["", "/g", "g/", "g//h", "g/./h", "g/../h", "..", "g h", "g\\h", "g\u0000", "ü"];
    for (const group of badGroups) {
      await expectCode(client.presign({ direction: "upload", group, filename: "f.txt" }), Code.InvalidArgument);
    }
    const badNames = ["", ".", "..", "a/b", "a\\b", "a\nb", "tab\there", "\u007f", "\u202eexe.txt"];
    for (const filename of badNames) {
      await expectCode(client.presign({ direction: "upload", group: "g", filename }), Code.InvalidArgument);
    }
    await expectCode(client.presign({ direction: "upload", filename: "f" }), Code.InvalidArgument);
    await expectCode(client.presign({ direction: "upload", group: "g" }), Code.InvalidArgument);
    const badPaths = [
      "",
      "g/x.txt",
      "s3://other-bucket/g/x.txt",
      `s3://${s3.bucket}`,
      `s3://${s3.bucket}/`,
      `s3://${s3.bucket}/g/../../other/x`,
      `s3://${s3.bucket}/g//x`,
      `s3://${s3.bucket}/./x`,
      `s3://${s3.bucket}-x/g/x.txt`,
      `https://${s3.bucket}/g/x.txt`,
    ];
    for (const path of badPaths) {
      await expectCode(client.presign({ direction: "download", path }), Code.InvalidArgument);
    }
    await expectCode(client.presign({ direction: "download" }), Code.InvalidArgument);
  });

  test("a direction other than upload or download, or fields of the other direction, are invalid_argument", async () => {
    await expectCode(client.presign({ direction: "delete", path: `s3://${s3.bucket}/g/x` }), Code.InvalidArgument);
    await expectCode(client.presign({ direction: "", group: "g", filename: "f" }), Code.InvalidArgument);
    await expectCode(
      client.presign({ direction: "upload", group: "g", filename: "f", path: `s3://${s3.bucket}/g/x` }),
      Code.InvalidArgument,
    );
    await expectCode(
      client.presign({ direction: "download", group: "g", path: `s3://${s3.bucket}/g/x` }),
      Code.InvalidArgument,
    );
  });
});

describe("PresignBatch", () => {
  test("answers each item as the single call would, in input order", async () => {
    const names = ["c.bin", "a.bin", "b.bin"];
    const ups = await client.presignBatch({
      direction: "upload",
      items: names.map((filename) => ({ group: "batch", filename })),
    });
    expect(ups.urls).toHaveLength(3);
    ups.urls.forEach((u, i) => expect(u.path).toMatch(new RegExp(`^s3://${s3.bucket}/batch/${UUID}/${names[i]}$`)));
    await Promise.all(ups.urls.map((u, i) => upload(u.url, `content of ${names[i]}`)));

    const downs = await client.presignBatch({ direction: "download", items: ups.urls.map((u) => ({ path: u.path! })) });
    expect(downs.urls.map((u) => u.path)).toEqual([undefined, undefined, undefined]);
    const bodies = await Promise.all(downs.urls.map(async (u) => Buffer.from(await download(u.url)).toString()));
    expect(bodies).toEqual(names.map((n) => `content of ${n}`));
  });

  test("an empty batch answers no urls", async () => {
    expect((await client.presignBatch({ direction: "upload", items: [] })).urls).toEqual([]);
    expect((await client.presignBatch({ direction: "", items: [] })).urls).toEqual([]);
  });

  test("one invalid item makes the whole call invalid_argument, naming the item", async () => {
    const err = await rejection(
      client.presignBatch({
        direction: "upload",
        items: [
          { group: "g", filename: "ok.txt" },
          { group: "g", filename: "../escape" },
        ],
      }),
    );
    expect(Code[err.code]).toBe(Code[Code.InvalidArgument]);
    expect(err.rawMessage).toContain("items[1]");
  });

  test("more items than the limit is invalid_argument", async () => {
    const items = Array.from({ length: MAX_ITEMS + 1 }, (_, i) => ({ group: "g", filename: `f${i}` }));
    await expectCode(client.presignBatch({ direction: "upload", items }), Code.InvalidArgument);
    const atLimit = await client.presignBatch({ direction: "upload", items: items.slice(0, MAX_ITEMS) });
    expect(atLimit.urls).toHaveLength(MAX_ITEMS);
  });
});

describe("the default limit", () => {
  test("a batch of 10,000 uploads is signed, one URL per item, in order", async () => {
    const big = storageClient({
      storage: s3.storage,
      limits: { maxBatchItems: 10_000 },
      presignExpiresSeconds: EXPIRES,
    });
    const items = Array.from({ length: 10_000 }, (_, i) => ({ group: "many", filename: `f${i}.bin` }));
    const res = await big.presignBatch({ direction: "upload", items });
    expect(res.urls).toHaveLength(10_000);
    res.urls.forEach((u, i) => expect(u.path!.endsWith(`/f${i}.bin`)).toBe(true));
    await upload(res.urls[9_999]!.url, "last");
    const down = await big.presign({ direction: "download", path: res.urls[9_999]!.path });
    expect(Buffer.from(await download(down.url)).toString()).toBe("last");
  });
});

describe("PresignUploadDir and List", () => {
  test("one fresh prefix for all relpaths; the listing finds every upload, in byte order, across pages", async () => {
    const relpaths = ["sub/b.txt", "a.txt", "Z/é.txt", "sub/deeper/_.txt", "B.txt"];
    const res = await client.presignUploadDir({ group: "runs/r1", relpaths });
    expect(res.root).toMatch(new RegExp(`^s3://${s3.bucket}/runs/r1/${UUID}/$`));
    expect(res.items.map((i) => i.path)).toEqual(relpaths.map((r) => res.root + r));
    await Promise.all(res.items.map((item, i) => upload(item.url, relpaths[i]!)));

    const again = await client.presignUploadDir({ group: "runs/r1", relpaths });
    expect(again.root).not.toBe(res.root);

    const listed = await client.list({ prefix: res.root });
    const rootKey = res.root.slice(`s3://${s3.bucket}/`.length);
    const expected = relpaths.map((r) => rootKey + r).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    // Byte order, not locale order: upper case before "_" before lower case before "é".
    expect(listed.keys).toEqual(expected);
    expect(listed.keys.map((k) => k.slice(rootKey.length))).toEqual([
      "B.txt",
      "Z/é.txt",
      "a.txt",
      "sub/b.txt",
      "sub/deeper/_.txt",
    ]);

    const partial = await client.list({ prefix: `${res.root}sub/` });
    expect(partial.keys).toEqual([`${rootKey}sub/b.txt`, `${rootKey}sub/deeper/_.txt`]);
    expect((await client.list({ prefix: `s3://${s3.bucket}/no-such-prefix/` })).keys).toEqual([]);
  });

  test("unsafe or repeated relpaths, too many of them, or a bad group are invalid_argument", async () => {
    const bad = [
      ["a", "a"],
      ["../x"],
      ["a/../../x"],
      ["/abs"],
      ["a//b"],
      ["./a"],
      ["a/"],
      [""],
      ["a\\b"],
      ["a\u0001b"],
    ];
    for (const relpaths of bad) {
      await expectCode(client.presignUploadDir({ group: "g", relpaths }), Code.InvalidArgument);
    }
    await expectCode(client.presignUploadDir({ group: "../g", relpaths: ["a"] }), Code.InvalidArgument);
    const many = Array.from({ length: MAX_ITEMS + 1 }, (_, i) => `f${i}`);
    await expectCode(client.presignUploadDir({ group: "g", relpaths: many }), Code.InvalidArgument);
  });

  test("a list prefix outside the bucket or with unsafe segments is invalid_argument", async () => {
    for (const prefix of ["", "runs/", "s3://other/runs/", `s3://${s3.bucket}/a/../b`, `s3://${s3.bucket}//a`]) {
      await expectCode(client.list({ prefix }), Code.InvalidArgument);
    }
  });
});

describe("PresignUploadDir with a root (CLI upload-dir --root, issue 31)", () => {
  test("reuses a root answered before, and the listing gives each object's size", async () => {
    const first = await client.presignUploadDir({ group: "runs/r2", relpaths: ["a.txt"] });
    await upload(first.items[0]!.url, "12345");
    const again = await client.presignUploadDir({ group: "runs/r2", relpaths: ["b/c.txt"], root: first.root });
    expect(again.root).toBe(first.root);
    expect(again.items.map((i) => i.path)).toEqual([`${first.root}b/c.txt`]);
    await upload(again.items[0]!.url, "xy");
    const listed = await client.list({ prefix: first.root });
    const rootKey = first.root.slice(`s3://${s3.bucket}/`.length);
    expect(listed.keys).toEqual([`${rootKey}a.txt`, `${rootKey}b/c.txt`]);
    expect(listed.sizes).toEqual([5n, 2n]);
    // without a root: a fresh prefix, as before
    expect((await client.presignUploadDir({ group: "runs/r2", relpaths: ["a.txt"] })).root).not.toBe(first.root);
  });

  test("a root outside the caller's group or bucket, or with unsafe segments, is invalid_argument", async () => {
    const b = s3.bucket;
    const bad = [
      `s3://${b}/other/x/`, // another group
      `s3://${b}/runs/`, // the group's parent
      `s3://${b}/runs/r2/`, // the group itself, no id
      `s3://${b}/runs/r2x/id/`, // a group that merely starts with the same letters
      `s3://${b}/runs/r2/id`, // not ending in /
      `s3://${b}/runs/r2/../other/`,
      `s3://${b}/runs/r2/./id/`,
      `s3://${b}/runs/r2//id/`,
      `s3://${b}/runs/r2/a b/`,
      `s3://other-bucket/runs/r2/id/`,
      "runs/r2/id/",
      "",
    ];
    for (const root of bad) {
      await expectCode(client.presignUploadDir({ group: "runs/r2", relpaths: ["a"], root }), Code.InvalidArgument);
    }
  });
});

describe("revision 1", () => {
  test("the same handlers serve resourcestore.v1.StorageService, which lacks upload-dir and list", async () => {
    const transport = createRouterTransport((router) => {
      router.service(
        V1StorageService,
        createStorageService({
          storage: s3.storage,
          limits: { maxBatchItems: MAX_ITEMS },
          presignExpiresSeconds: EXPIRES,
        }),
      );
    }, routerAs());
    const v1 = createClient(V1StorageService, transport);
    expect((await v1.config({})).s3Bucket).toBe(s3.bucket);
    const up = await v1.presign({ direction: "upload", group: "v1", filename: "x" });
    expect(up.path).toMatch(new RegExp(`^s3://${s3.bucket}/v1/${UUID}/x$`));
    expect(Object.keys(V1StorageService.method)).not.toContain("list");
  });
});

describe("unreachable storage", () => {
  test("calls that reach S3 answer unavailable; presigning needs no S3", async () => {
    const port = await new Promise<number>((resolve) => {
      const server = createServer();
      server.listen(0, "127.0.0.1", () => {
        const address = server.address();
        server.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0));
      });
    });
    const storage = connectObjectStorage({
      endpoint: `http://127.0.0.1:${port}`,
      bucket: s3.bucket,
      region: "us-east-1",
      ...EMBEDDED_CREDENTIALS,
    });
    try {
      const dead = storageClient({ storage, limits: { maxBatchItems: MAX_ITEMS }, presignExpiresSeconds: EXPIRES });
      await expectCode(dead.list({ prefix: `s3://${s3.bucket}/runs/` }), Code.Unavailable);
      await expectCode(storage.ping(), Code.Unavailable);
      await expectCode(dead.parquetPreview({ path: `s3://${s3.bucket}/x.parquet` }), Code.Unavailable);
      const err = await rejection(dead.list({ prefix: `s3://${s3.bucket}/` }));
      expect(err.rawMessage).not.toContain("127.0.0.1");
      const up = await dead.presign({ direction: "upload", group: "g", filename: "f" });
      expect(up.url).toContain(`127.0.0.1:${port}`);
    } finally {
      await storage.close();
    }
  });
});
