// createObjectStorage chooses by config: an embedded s3rver under DATA_DIR
// when S3_ENDPOINT is unset, the configured S3 otherwise.
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { loadConfig } from "../../src/config.js";
import { createObjectStorage } from "../../src/storage/index.js";
import { startTestS3 } from "../support/s3.js";
import type { TestS3 } from "../support/s3.js";
import { storageClient } from "./client.js";

let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "rs-data-"));
});

afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

describe("embedded default", () => {
  test("runs s3rver on 127.0.0.1 under DATA_DIR/s3 with the bucket made, and presigned URLs point at it", async () => {
    const config = loadConfig({ DATA_DIR: dataDir, S3_BUCKET: "embedded-bucket" });
    expect(config.s3.endpoint).toBeUndefined();
    const storage = await createObjectStorage(config);
    try {
      const endpoint = new URL(storage.publicEndpoint);
      expect(endpoint.hostname).toBe("127.0.0.1");
      expect(Number(endpoint.port)).toBeGreaterThan(0);
      expect(storage.bucket).toBe("embedded-bucket");

      const client = storageClient({
        storage,
        limits: config.limits,
        presignExpiresSeconds: config.s3.presignExpiresSeconds,
      });
      expect(await client.config({})).toMatchObject({
        s3Endpoint: storage.publicEndpoint,
        s3Bucket: "embedded-bucket",
      });
      const up = await client.presign({ direction: "upload", group: "emb", filename: "hello.txt" });
      expect(new URL(up.url).origin).toBe(endpoint.origin);
      expect((await fetch(up.url, { method: "PUT", body: "hello, embedded" })).status).toBe(200);
      const down = await client.presign({ direction: "download", path: up.path });
      expect(await (await fetch(down.url)).text()).toBe("hello, embedded");
      expect((await client.list({ prefix: "s3://embedded-bucket/emb/" })).keys).toEqual([
        up.path!.slice("s3://embedded-bucket/".length),
      ]);

      expect(await readdir(join(dataDir, "s3"))).toContain("embedded-bucket");
    } finally {
      await storage.close();
    }
    // close() stops the server: its port no longer answers.
    await expect(fetch(storage.publicEndpoint)).rejects.toThrow();
  });

  test("a restart on the same DATA_DIR keeps the objects", async () => {
    const config = loadConfig({ DATA_DIR: dataDir, S3_BUCKET: "embedded-bucket" });
    const storage = await createObjectStorage(config);
    try {
      const keys = await storage.listKeys("emb/");
      expect(keys).toHaveLength(1);
    } finally {
      await storage.close();
    }
  });
});

describe("configured S3", () => {
  let s3: TestS3;
  beforeAll(async () => {
    s3 = await startTestS3();
  });
  afterAll(async () => {
    await s3?.stop();
  });

  test("talks to S3_ENDPOINT and writes S3_PUBLIC_ENDPOINT into presigned URLs and /s3/config", async () => {
    const config = loadConfig({
      DATA_DIR: dataDir,
      S3_ENDPOINT: s3.endpoint,
      S3_PUBLIC_ENDPOINT: "https://files.example.org:9443",
      S3_BUCKET: s3.bucket,
      S3_ACCESS_KEY_ID: "S3RVER",
      S3_SECRET_ACCESS_KEY: "S3RVER",
      PRESIGN_EXPIRES_SECONDS: "120",
    });
    const storage = await createObjectStorage(config);
    try {
      const client = storageClient({
        storage,
        limits: config.limits,
        presignExpiresSeconds: config.s3.presignExpiresSeconds,
      });
      expect(await client.config({})).toMatchObject({
        s3Endpoint: "https://files.example.org:9443",
        s3Bucket: s3.bucket,
      });
      const up = await client.presign({ direction: "upload", group: "cfg", filename: "x.txt" });
      const url = new URL(up.url);
      expect(url.origin).toBe("https://files.example.org:9443");
      // Path-style: the bucket is the first path segment, not a host name.
      expect(url.pathname.startsWith(`/${s3.bucket}/cfg/`)).toBe(true);
      expect(url.searchParams.get("X-Amz-Expires")).toBe("120");

      // The service itself reaches S3 at the internal endpoint.
      const internal = await s3.storage.presignUpload("cfg/direct.txt", 60);
      await fetch(internal, { method: "PUT", body: "direct" });
      expect(await storage.listKeys("cfg/")).toEqual(["cfg/direct.txt"]);
    } finally {
      await storage.close();
    }
  });

  test("ping answers while S3 and the bucket are there, unavailable otherwise", async () => {
    const base = { S3_ENDPOINT: s3.endpoint, S3_ACCESS_KEY_ID: "S3RVER", S3_SECRET_ACCESS_KEY: "S3RVER" };
    const good = await createObjectStorage(loadConfig({ ...base, S3_BUCKET: s3.bucket }));
    const noBucket = await createObjectStorage(loadConfig({ ...base, S3_BUCKET: "no-such-bucket" }));
    try {
      await expect(good.ping()).resolves.toBeUndefined();
      await expect(noBucket.ping()).rejects.toMatchObject({ code: Code.Unavailable });
    } finally {
      await good.close();
      await noBucket.close();
    }
  });

  test("without S3_PUBLIC_ENDPOINT the presigned URLs use S3_ENDPOINT", async () => {
    const config = loadConfig({
      S3_ENDPOINT: s3.endpoint,
      S3_BUCKET: s3.bucket,
      S3_ACCESS_KEY_ID: "S3RVER",
      S3_SECRET_ACCESS_KEY: "S3RVER",
    });
    const storage = await createObjectStorage(config);
    try {
      expect(storage.publicEndpoint).toBe(s3.endpoint);
      const up = await storage.presignUpload("cfg/y.txt", 60);
      expect((await fetch(up, { method: "PUT", body: "y" })).status).toBe(200);
    } finally {
      await storage.close();
    }
  });
});
