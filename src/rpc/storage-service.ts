// StorageService (docs/api.md, docs/limits.md): presigned URLs,
// listing and parquet previews. One object of handlers serves both revisions; v1 lists fewer methods.
import { ConnectError } from "@connectrpc/connect";
import type { ServiceImpl } from "@connectrpc/connect";
import type { LimitsConfig } from "../config.js";
import { seesEverything, type Grants } from "../access/index.js";
import { callerOf } from "../auth/index.js";
import { invalidArgument, notFound, prefixMessage } from "../errors.js";
import { objectPathVisible, readerFor, type Db } from "../store/index.js";
import type { PresignItem } from "../../gen/resourcestore/type/v1/storage_pb.js";
import type { StorageService } from "../../gen/resourcestore/v2/storage_service_pb.js";
import type { ObjectStorage } from "../storage/index.js";
import {
  PREVIEW_DEFAULT_LIMIT,
  PREVIEW_MAX_LIMIT,
  parseListPrefix,
  parseObjectPath,
  previewParquet,
  toS3Path,
  reusedPrefix,
  uploadDirKeys,
  uploadKey,
} from "../storage/index.js";

export interface StorageServiceDeps {
  readonly storage: ObjectStorage;
  /**
   * Where the paths a caller may reach are looked up (docs/contract/18-access.md).
   * Without it only a caller who sees everything reaches any object.
   */
  readonly db?: Db;
  /** maxPreviewRows and maxListKeys default to the API's 10,000 and 100,000. */
  readonly limits: Pick<LimitsConfig, "maxBatchItems"> & Partial<Pick<LimitsConfig, "maxPreviewRows" | "maxListKeys">>;
  /** Lifetime of every presigned URL. */
  readonly presignExpiresSeconds: number;
  /** MAX_PREVIEW_BYTES: bytes of an object one parquet preview may read, footer included (default unbounded). */
  readonly maxPreviewBytes?: number;
}

type Direction = "upload" | "download";

function parseDirection(direction: string): Direction {
  const d = direction.toLowerCase();
  if (d === "upload" || d === "download") return d;
  throw invalidArgument('direction must be "upload" or "download"');
}

function checkCount(count: number, max: number, what: string): void {
  if (count > max) throw invalidArgument(`at most ${max} ${what} in one call, got ${count}`, "BATCH_TOO_LARGE");
}

interface SignedItem {
  url: string;
  path?: string;
}

/** Who started each upload-dir root: the table of migration 24, or (without a database) this process's memory. */
interface UploadRoots {
  record(prefix: string, actor: string): Promise<void>;
  startedBy(prefix: string, actor: string): Promise<boolean>;
}

function uploadRoots(db: Db | undefined): UploadRoots {
  if (db === undefined) {
    const started = new Map<string, string>();
    return {
      record: (prefix, actor) => {
        started.set(prefix, actor);
        return Promise.resolve();
      },
      startedBy: (prefix, actor) => Promise.resolve(started.get(prefix) === actor),
    };
  }
  return {
    async record(prefix, actor) {
      // A fresh prefix holds a random id: it never collides.
      await db.query("INSERT INTO upload_roots (prefix, actor) VALUES ($1, $2)", [prefix, actor]);
    },
    async startedBy(prefix, actor) {
      // The primary, not a replica: a root is resumed right after it was started.
      const { rows } = await db.query("SELECT 1 FROM upload_roots WHERE prefix = $1 AND actor = $2", [prefix, actor]);
      return rows.length > 0;
    },
  };
}

export function createStorageService(deps: StorageServiceDeps): ServiceImpl<typeof StorageService> {
  const { storage, limits, presignExpiresSeconds: expires } = deps;
  const maxPreview = limits.maxPreviewRows ?? PREVIEW_MAX_LIMIT;
  const maxListKeys = limits.maxListKeys ?? 100_000;
  const roots = uploadRoots(deps.db);

  /**
   * Access (docs/contract/18-access.md): an object is answered for only when it is
   * the path or uri of a resource the caller may see now, or the caller sees
   * everything; otherwise it is absent (404), whether or not it exists.
   */
  async function checkReachable(grants: Grants, key: string): Promise<void> {
    if (seesEverything(grants)) return;
    const path = toS3Path(storage.bucket, key);
    const db = deps.db;
    if (db === undefined || !(await objectPathVisible(await readerFor(db, undefined), grants, path)))
      throw notFound(`no object at ${path}`);
  }

  /** Checks one item and returns a signer, so a batch signs nothing until every item passed. */
  function planItem(
    grants: Grants,
    direction: Direction,
    item: Omit<PresignItem, "$typeName">,
  ): () => Promise<SignedItem> {
    if (direction === "upload") {
      if (item.path !== undefined) throw invalidArgument("path is for downloads; an upload takes filename and group");
      const key = uploadKey(item.group, item.filename);
      return async () => ({ url: await storage.presignUpload(key, expires), path: toS3Path(storage.bucket, key) });
    }
    if (item.filename !== undefined || item.group !== undefined) {
      throw invalidArgument("filename and group are for uploads; a download takes path");
    }
    const key = parseObjectPath(item.path, storage.bucket);
    return async () => {
      await checkReachable(grants, key);
      return { url: await storage.presignDownload(key, expires) };
    };
  }

  return {
    config() {
      return { s3Endpoint: storage.publicEndpoint, s3Bucket: storage.bucket };
    },

    async presign(req, ctx) {
      const { grants } = callerOf(ctx);
      return planItem(grants, parseDirection(req.direction), req)();
    },

    async presignBatch(req, ctx) {
      const { grants } = callerOf(ctx);
      // An empty batch is an answer of its own, even without a direction.
      if (req.items.length === 0 && req.direction === "") return { urls: [] };
      const direction = parseDirection(req.direction);
      checkCount(req.items.length, limits.maxBatchItems, "items");
      const signers = req.items.map((item, i) => {
        try {
          return planItem(grants, direction, item);
        } catch (err) {
          // Say which item was refused; the code stays the same.
          if (err instanceof ConnectError) throw prefixMessage(err, `items[${i}]`);
          throw err;
        }
      });
      // A download item the caller may not reach rejects the whole batch (404).
      return { urls: await Promise.all(signers.map((sign) => sign())) };
    },

    async presignUploadDir(req, ctx) {
      const { actor } = callerOf(ctx);
      checkCount(req.relpaths.length, limits.maxBatchItems, "relpaths");
      const reuse = req.root === undefined ? undefined : reusedPrefix(req.root, req.group, storage.bucket);
      const { prefix, keys } = uploadDirKeys(req.group, req.relpaths, reuse);
      // A root is resumed only by the actor that started it (docs/contract/18-access.md):
      // anyone else would get PUT URLs over objects it did not upload. Checked
      // after the keys, so a malformed request is still 400 first.
      if (reuse !== undefined) {
        if (!(await roots.startedBy(reuse, actor)))
          throw notFound(`no upload root ${req.root ?? ""} started by this caller`);
      } else {
        await roots.record(prefix, actor);
      }
      const items = await Promise.all(
        keys.map(async (key) => ({
          url: await storage.presignUpload(key, expires),
          path: toS3Path(storage.bucket, key),
        })),
      );
      return { root: toS3Path(storage.bucket, prefix), items };
    },

    async list(req, ctx) {
      const { grants } = callerOf(ctx);
      const prefix = parseListPrefix(req.prefix, storage.bucket);
      // Keys say nothing of whose they are: only a caller who sees everything lists them.
      if (!seesEverything(grants)) throw notFound(`nothing to list under ${req.prefix}`);
      const objects = await storage.listObjects(prefix, maxListKeys);
      if (objects.length > maxListKeys) {
        throw invalidArgument(
          `more than ${maxListKeys} keys under this prefix; list a narrower prefix`,
          "TOO_MANY_KEYS",
        );
      }
      return { keys: objects.map((o) => o.key), sizes: objects.map((o) => BigInt(o.size)) };
    },

    async parquetPreview(req, ctx) {
      const { grants } = callerOf(ctx);
      const limit = req.limit ?? Math.min(PREVIEW_DEFAULT_LIMIT, maxPreview);
      if (limit < 1 || limit > maxPreview) {
        throw invalidArgument(`limit must be between 1 and ${maxPreview}`, "LIMIT_OUT_OF_RANGE");
      }
      const offset = req.offset ?? 0n;
      if (offset < 0n) throw invalidArgument("offset must not be negative", "LIMIT_OUT_OF_RANGE");
      const key = parseObjectPath(req.path, storage.bucket);
      await checkReachable(grants, key);
      // Past MAX_SAFE_INTEGER there are no rows anyway; clamping keeps Number safe.
      const start = offset > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(offset);
      const preview = await previewParquet(storage, key, start, limit, deps.maxPreviewBytes);
      return {
        columns: preview.columns,
        schema: preview.schema,
        totalRows: BigInt(preview.totalRows),
        returnedRows: BigInt(preview.returnedRows),
        offset,
        data: preview.data,
      };
    },
  };
}
