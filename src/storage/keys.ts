// Object keys and s3:// paths. Everything a client names here ends up in a
// URL path, where `.`/`..` segments are resolved and `\` may become `/`, so
// one bad segment could point a presigned URL at another key or bucket. Every
// check below exists to keep an accepted input inside the bucket and (for
// uploads) inside its group prefix.
import { randomUUID } from "node:crypto";
import { invalidArgument } from "../errors.js";

/** S3 refuses longer keys; saying so here gives a clear 400 instead. */
const MAX_KEY_BYTES = 1024;

const GROUP_SEGMENT = /^[A-Za-z0-9._-]+$/;
// Control characters, lone surrogates (they cannot be encoded in a URL),
// invisible format characters (bidi overrides spoof names) and line/paragraph
// separators: none of them is printable.
const UNPRINTABLE = /[\p{Cc}\p{Cs}\p{Cf}\p{Zl}\p{Zp}]/u;

function checkSegment(segment: string, what: string): void {
  if (segment === "") throw invalidArgument(`${what} has an empty segment`, "INVALID_OBJECT_PATH");
  if (segment === "." || segment === "..")
    throw invalidArgument(`${what} has a "${segment}" segment`, "INVALID_OBJECT_PATH");
  if (segment.includes("\\")) throw invalidArgument(`${what} contains a backslash`, "INVALID_OBJECT_PATH");
  if (UNPRINTABLE.test(segment))
    throw invalidArgument(`${what} contains a control or non-printable character`, "INVALID_OBJECT_PATH");
}

function checkKeyLength(key: string): void {
  if (Buffer.byteLength(key, "utf8") > MAX_KEY_BYTES) {
    throw invalidArgument(`the object key would exceed ${MAX_KEY_BYTES} bytes`, "INVALID_OBJECT_PATH");
  }
}

/** `group`: one or more segments of [A-Za-z0-9._-] joined by `/`. */
function validateGroup(group: string | undefined): string {
  if (group === undefined || group === "") throw invalidArgument("group is required", "INVALID_OBJECT_PATH");
  if (group.startsWith("/")) throw invalidArgument("group must not start with /", "INVALID_OBJECT_PATH");
  for (const segment of group.split("/")) {
    checkSegment(segment, "group");
    if (!GROUP_SEGMENT.test(segment))
      throw invalidArgument("group segments may hold only A-Z, a-z, 0-9, '.', '_' and '-'", "INVALID_OBJECT_PATH");
  }
  return group;
}

/** `filename`: one segment of printable characters without `/` or `\`. */
function validateFilename(filename: string | undefined): string {
  if (filename === undefined || filename === "") throw invalidArgument("filename is required", "INVALID_OBJECT_PATH");
  if (filename.includes("/")) throw invalidArgument("filename must not contain /", "INVALID_OBJECT_PATH");
  checkSegment(filename, "filename");
  return filename;
}

/** A relative path of an upload-dir item: segments like a filename, joined by `/`. */
function validateRelpath(relpath: string): string {
  if (relpath === "") throw invalidArgument("relpath must not be empty", "INVALID_OBJECT_PATH");
  if (relpath.startsWith("/")) throw invalidArgument("relpath must be relative", "INVALID_OBJECT_PATH");
  for (const segment of relpath.split("/")) checkSegment(segment, "relpath");
  return relpath;
}

/** A fresh `{group}/{random id}/` prefix: nobody else's upload shares it. */
function freshPrefix(group: string): string {
  return `${validateGroup(group)}/${randomUUID()}/`;
}

/** Key of a single upload: `{group}/{random id}/{filename}`. */
export function uploadKey(group: string | undefined, filename: string | undefined): string {
  const name = validateFilename(filename);
  const key = freshPrefix(validateGroup(group)) + name;
  checkKeyLength(key);
  return key;
}

/**
 * The prefix of a root given back to upload-dir (`s3://bucket/{group}/{id}/`):
 * in the service's bucket, under the caller's `group` with at least one
 * segment more, every segment checked as a group's, ending in `/`. Anything
 * else could aim the presigned URLs at another group's objects.
 */
export function reusedPrefix(root: string, group: string, bucket: string): string {
  const groupPrefix = `${validateGroup(group)}/`;
  const key = keyInBucket(root, bucket, "root");
  if (!key.endsWith("/")) throw invalidArgument("root must end with /", "INVALID_OBJECT_PATH");
  if (!key.startsWith(groupPrefix) || key.length === groupPrefix.length) {
    throw invalidArgument("root must lie under the group given (s3://bucket/{group}/{id}/)", "INVALID_OBJECT_PATH");
  }
  for (const segment of key.slice(0, -1).split("/")) {
    checkSegment(segment, "root");
    if (!GROUP_SEGMENT.test(segment))
      throw invalidArgument("root segments may hold only A-Z, a-z, 0-9, '.', '_' and '-'", "INVALID_OBJECT_PATH");
  }
  checkKeyLength(key);
  return key;
}

/**
 * Keys of an upload-dir, one per relpath in input order, under one prefix: a
 * fresh one, or `reuse` (already checked by reusedPrefix).
 */
export function uploadDirKeys(
  group: string,
  relpaths: readonly string[],
  reuse?: string,
): { prefix: string; keys: string[] } {
  const prefix = reuse ?? freshPrefix(group);
  const seen = new Set<string>();
  const keys = relpaths.map((relpath) => {
    validateRelpath(relpath);
    if (seen.has(relpath))
      throw invalidArgument(`relpath ${JSON.stringify(relpath)} is given twice`, "INVALID_OBJECT_PATH");
    seen.add(relpath);
    const key = prefix + relpath;
    checkKeyLength(key);
    return key;
  });
  return { prefix, keys };
}

export function toS3Path(bucket: string, key: string): string {
  return `s3://${bucket}/${key}`;
}

/** The raw key of an `s3://bucket/...` address in the service's bucket (unchecked segments). */
function keyInBucket(path: string | undefined, bucket: string, what: string): string {
  if (path === undefined || path === "") throw invalidArgument(`${what} is required`, "INVALID_OBJECT_PATH");
  if (!path.startsWith("s3://"))
    throw invalidArgument(`${what} must be an s3://bucket/key address`, "INVALID_OBJECT_PATH");
  const rest = path.slice("s3://".length);
  const slash = rest.indexOf("/");
  const pathBucket = slash === -1 ? rest : rest.slice(0, slash);
  if (pathBucket !== bucket) throw invalidArgument(`${what} is not in the service's bucket`, "INVALID_OBJECT_PATH");
  return slash === -1 ? "" : rest.slice(slash + 1);
}

/** `s3://bucket/key` of one object in the service's bucket -> key. */
export function parseObjectPath(path: string | undefined, bucket: string, what = "path"): string {
  const key = keyInBucket(path, bucket, what);
  if (key === "") throw invalidArgument(`${what} names no object`, "INVALID_OBJECT_PATH");
  for (const segment of key.split("/")) checkSegment(segment, what);
  checkKeyLength(key);
  return key;
}

/**
 * `s3://bucket/prefix` -> prefix. The last segment may be partial (a prefix of
 * names) or empty (a trailing `/`); `s3://bucket/` lists the whole bucket.
 */
export function parseListPrefix(path: string | undefined, bucket: string): string {
  const prefix = keyInBucket(path, bucket, "prefix");
  if (prefix === "") return "";
  const segments = prefix.split("/");
  const last = segments.length - 1;
  segments.forEach((segment, i) => {
    if (i === last && segment === "") return;
    checkSegment(segment, "prefix");
  });
  checkKeyLength(prefix);
  return prefix;
}
