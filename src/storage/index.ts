// Object storage: S3 client, presigning, listing, parquet preview.
export type { ObjectStorage } from "./object-storage.js";
export { connectObjectStorage, createObjectStorage } from "./object-storage.js";
export { EMBEDDED_CREDENTIALS, startEmbeddedS3 } from "./embedded-s3.js";
export { parseListPrefix, parseObjectPath, toS3Path, reusedPrefix, uploadDirKeys, uploadKey } from "./keys.js";
export { storageError } from "./s3-errors.js";
export { PREVIEW_DEFAULT_LIMIT, PREVIEW_MAX_LIMIT, previewParquet } from "./parquet-preview.js";
export { createUrlPresigner } from "./presigner.js";
export { bigintToJson, formatDate, formatTimestamp, toJsonSafe } from "./json-safe.js";
