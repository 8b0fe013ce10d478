// One s3rver per test file: port 0, a temporary folder, removed afterwards.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EMBEDDED_CREDENTIALS, connectObjectStorage, startEmbeddedS3 } from "../../src/storage/index.js";
import type { ObjectStorage } from "../../src/storage/index.js";

export const TEST_BUCKET = "test-bucket";

export interface TestS3 {
  readonly endpoint: string;
  readonly bucket: string;
  /** An ObjectStorage on this server (closed by `stop()`). */
  readonly storage: ObjectStorage;
  stop(): Promise<void>;
}

export interface TestS3Options {
  readonly bucket?: string;
  /** Small pages make a short listing take several requests. */
  readonly listPageSize?: number;
}

export async function startTestS3(options: TestS3Options = {}): Promise<TestS3> {
  const bucket = options.bucket ?? TEST_BUCKET;
  const directory = await mkdtemp(join(tmpdir(), "rs-s3-"));
  const server = await startEmbeddedS3({ directory, bucket });
  const storage = connectObjectStorage({
    endpoint: server.endpoint,
    bucket,
    region: "us-east-1",
    ...EMBEDDED_CREDENTIALS,
    listPageSize: options.listPageSize,
  });
  return {
    endpoint: server.endpoint,
    bucket,
    storage,
    async stop() {
      await storage.close();
      await server.close();
      await rm(directory, { recursive: true, force: true });
    },
  };
}
