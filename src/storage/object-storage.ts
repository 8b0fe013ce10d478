// The object storage the service talks to, chosen by config: a configured S3
// (AWS, MinIO, Ceph) or, with no S3_ENDPOINT, an embedded s3rver under
// DATA_DIR. Everything above this file sees only the ObjectStorage interface.
import { join } from "node:path";
import {
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import { Code } from "@connectrpc/connect";
import type { Config } from "../config.js";
import { unavailable } from "../errors.js";
import { quietAwsSdkNodeNotice } from "../node-support.js";
import { EMBEDDED_CREDENTIALS, startEmbeddedS3 } from "./embedded-s3.js";
import { createUrlPresigner } from "./presigner.js";
import { storageError } from "./s3-errors.js";

export interface ObjectStorage {
  /** Talks to S3 from inside the service's network. */
  readonly client: S3Client;
  readonly bucket: string;
  /** The endpoint written into presigned URLs and told to clients. */
  readonly publicEndpoint: string;
  presignUpload(key: string, expiresInSeconds: number): Promise<string>;
  presignDownload(key: string, expiresInSeconds: number): Promise<string>;
  /** Every key under `prefix` (all listing pages), in byte order; stops paging once more than `stopAfter` are found. */
  listKeys(prefix: string, stopAfter?: number): Promise<string[]>;
  /** listKeys with each object's size in bytes. */
  listObjects(prefix: string, stopAfter?: number): Promise<{ key: string; size: number }[]>;
  /** Size and ETag of an object; 404 not_found when it is missing. */
  headObject(key: string): Promise<{ size: number; etag: string | undefined }>;
  /** Bytes [start, end) of an object, refused if its ETag is no longer `etag`. */
  readRange(key: string, start: number, end: number, etag: string | undefined): Promise<Uint8Array>;
  /** Resolves when S3 answers and the bucket exists (for /readyz); else 503 unavailable. */
  ping(): Promise<void>;
  /** Releases the clients and stops the embedded server, if any. */
  close(): Promise<void>;
}

export interface S3Connection {
  readonly endpoint: string;
  /** Defaults to `endpoint`. */
  readonly publicEndpoint?: string | undefined;
  readonly bucket: string;
  readonly region: string;
  readonly accessKeyId?: string | undefined;
  readonly secretAccessKey?: string | undefined;
  readonly forcePathStyle?: boolean | undefined;
  /** Keys per listing page; unset = the server's (1,000 on S3). */
  readonly listPageSize?: number | undefined;
  /** Called by close() after the clients are released. */
  readonly onClose?: (() => Promise<void>) | undefined;
}

function makeClient(endpoint: string, c: S3Connection): S3Client {
  // The SDK reads its switch when the client starts.
  quietAwsSdkNodeNotice();
  return new S3Client({
    endpoint,
    region: c.region,
    forcePathStyle: c.forcePathStyle ?? true,
    // Without keys the SDK's default chain (environment, instance role) applies.
    ...(c.accessKeyId !== undefined && c.secretAccessKey !== undefined
      ? { credentials: { accessKeyId: c.accessKeyId, secretAccessKey: c.secretAccessKey } }
      : {}),
    // Flexible checksums would be signed into presigned URLs (which a plain
    // PUT cannot satisfy) and are unknown to s3rver and many S3 clones.
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
    // An unreachable S3 must turn into a 503 quickly, not hang a call.
    requestHandler: { connectionTimeout: 5_000, requestTimeout: 60_000 },
    maxAttempts: 2,
  });
}

/** ObjectStorage over an S3 endpoint (no network traffic until used). */
export function connectObjectStorage(c: S3Connection): ObjectStorage {
  const client = makeClient(c.endpoint, c);
  const publicEndpoint = c.publicEndpoint ?? c.endpoint;
  const bucket = c.bucket;
  // Presigning is offline: the public endpoint goes into the URL, the client
  // lends its credentials and region.
  const presigner = createUrlPresigner(client, publicEndpoint, bucket, c.forcePathStyle ?? true);
  let closed = false;

  async function listObjects(
    prefix: string,
    stopAfter = Number.POSITIVE_INFINITY,
  ): Promise<{ key: string; size: number }[]> {
    const objects: { key: string; size: number }[] = [];
    // ListObjects (v1) paged by marker: every S3 clone has it, while
    // s3rver's v2 continuation tokens need DES, which OpenSSL 3 dropped.
    let marker: string | undefined;
    try {
      for (;;) {
        const page = await client.send(
          new ListObjectsCommand({ Bucket: bucket, Prefix: prefix, Marker: marker, MaxKeys: c.listPageSize }),
        );
        for (const object of page.Contents ?? [])
          if (object.Key !== undefined) objects.push({ key: object.Key, size: object.Size ?? 0 });
        // Past the caller's limit the answer is refused anyway: no further page is asked for.
        if (objects.length > stopAfter) break;
        const last = objects[objects.length - 1]?.key;
        if (page.IsTruncated !== true || last === undefined || last === marker) break;
        marker = last;
      }
    } catch (err) {
      throw storageError(err, "prefix");
    }
    // S3 promises UTF-8 byte order; not every clone keeps it, so enforce it.
    return objects.sort((a, b) => Buffer.compare(Buffer.from(a.key), Buffer.from(b.key)));
  }

  return {
    client,
    bucket,
    publicEndpoint,
    presignUpload(key, expiresIn) {
      return presigner.presign("PUT", key, expiresIn);
    },
    presignDownload(key, expiresIn) {
      return presigner.presign("GET", key, expiresIn);
    },
    async listKeys(prefix, stopAfter) {
      return (await listObjects(prefix, stopAfter)).map((o) => o.key);
    },
    listObjects,
    async headObject(key) {
      try {
        const head = await client.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
        return { size: head.ContentLength ?? 0, etag: head.ETag };
      } catch (err) {
        throw storageError(err);
      }
    },
    async readRange(key, start, end, etag) {
      if (end <= start) return new Uint8Array(0);
      try {
        const res = await client.send(
          new GetObjectCommand({ Bucket: bucket, Key: key, Range: `bytes=${start}-${end - 1}`, IfMatch: etag }),
        );
        if (res.Body === undefined) throw new Error("empty body");
        return await res.Body.transformToByteArray();
      } catch (err) {
        throw storageError(err);
      }
    },
    async ping() {
      try {
        await client.send(new HeadBucketCommand({ Bucket: bucket }));
      } catch (err) {
        const mapped = storageError(err);
        // A missing bucket answers 404 to HeadBucket: for readiness that is "not ready".
        throw mapped.code === Code.NotFound
          ? unavailable("object storage bucket is missing", "STORAGE_UNAVAILABLE")
          : mapped;
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      client.destroy();
      await c.onClose?.();
    },
  };
}

/**
 * The service's object storage: S3 at `config.s3.endpoint`, or an embedded
 * s3rver on 127.0.0.1 (free port) storing under `${dataDir}/s3`.
 */
export async function createObjectStorage(config: Config): Promise<ObjectStorage> {
  const s3 = config.s3;
  if (s3.endpoint !== undefined) {
    return connectObjectStorage({
      endpoint: s3.endpoint,
      publicEndpoint: s3.publicEndpoint,
      bucket: s3.bucket,
      region: s3.region,
      accessKeyId: s3.accessKeyId,
      secretAccessKey: s3.secretAccessKey,
      forcePathStyle: s3.forcePathStyle,
    });
  }
  const embedded = await startEmbeddedS3({ directory: join(config.dataDir, "s3"), bucket: s3.bucket });
  return connectObjectStorage({
    endpoint: embedded.endpoint,
    publicEndpoint: s3.publicEndpoint,
    bucket: s3.bucket,
    // s3rver knows one access key and does not check SigV4 signatures or regions.
    region: s3.region,
    ...EMBEDDED_CREDENTIALS,
    forcePathStyle: true,
    onClose: () => embedded.close(),
  });
}
