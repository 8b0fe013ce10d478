// /s3/list stops at MAX_LIST_KEYS while listing (docs/contract/16-limits.md): once more
// keys than the limit are found, no further listing page is asked for.
import { ListObjectsCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, expect, test } from "vitest";
import { startTestS3, type TestS3 } from "../support/s3.js";
import { storageClient } from "./client.js";

let s3: TestS3;
let pages = 0;

beforeAll(async () => {
  s3 = await startTestS3({ listPageSize: 2 });
  for (let i = 0; i < 20; i++) {
    await s3.storage.client.send(
      new PutObjectCommand({ Bucket: s3.bucket, Key: `many/k${String(i).padStart(2, "0")}`, Body: "x" }),
    );
  }
  const client = s3.storage.client;
  const send = client.send.bind(client) as (cmd: unknown) => Promise<unknown>;
  (client as unknown as { send: (cmd: unknown) => Promise<unknown> }).send = (cmd: unknown) => {
    if (cmd instanceof ListObjectsCommand) pages++;
    return send(cmd);
  };
});
afterAll(async () => {
  await s3?.stop();
});

test("a listing past the limit stops paging as soon as the limit is passed", async () => {
  pages = 0;
  expect(await s3.storage.listKeys("many/")).toHaveLength(20);
  expect(pages).toBe(10);

  pages = 0;
  const client = storageClient({
    storage: s3.storage,
    limits: { maxBatchItems: 10, maxListKeys: 3 },
    presignExpiresSeconds: 60,
  });
  await expect(client.list({ prefix: `s3://${s3.bucket}/many/` })).rejects.toThrow(/more than 3 keys/);
  // Two pages of two keys are enough to know there are more than three.
  expect(pages).toBe(2);
});
