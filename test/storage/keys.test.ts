// Property tests: whatever a client sends as group, filename, relpath or path,
// an accepted input yields a key inside the group prefix (and the bucket) with
// no empty, "." or ".." segment, and the presigned URL, once a URL parser has
// normalised it, still points at exactly that key.
import { Code, ConnectError } from "@connectrpc/connect";
import fc from "fast-check";
import { afterAll, describe, expect, test } from "vitest";
import {
  EMBEDDED_CREDENTIALS,
  connectObjectStorage,
  parseObjectPath,
  uploadDirKeys,
  uploadKey,
} from "../../src/storage/index.js";

const BUCKET = "prop-bucket";
// Presigning never touches the network, so nothing needs to listen here.
const storage = connectObjectStorage({
  endpoint: "http://127.0.0.1:9",
  bucket: BUCKET,
  region: "us-east-1",
  ...EMBEDDED_CREDENTIALS,
});

afterAll(() => storage.close());

const piece = fc.constantFrom(
  "",
  ".",
  "..",
  "a",
  "B-9",
  "_x.",
  "...",
  "\\",
  "..\\..",
  "%2e%2e",
  "%2F",
  " ",
  "\u0000",
  "\n",
  "\u007f",
  "\u0085",
  "\u202e",
  "\u2028",
  "é",
  "\ud800",
  "😀",
  "?",
  "#",
  ";",
);
const pathLike = fc
  .tuple(fc.boolean(), fc.array(piece, { maxLength: 5 }))
  .map(([leadingSlash, parts]) => (leadingSlash ? "/" : "") + parts.join("/"));
const anyText = fc.oneof(
  pathLike,
  fc.array(fc.oneof(piece, fc.string({ maxLength: 4 })), { maxLength: 6 }).map((a) => a.join("/")),
  fc.string({ maxLength: 24 }),
  fc.string({ unit: "binary", maxLength: 24 }),
  fc.string({ unit: "grapheme", maxLength: 24 }),
);

/** Runs `f`; an exception must be invalid_argument, and then the result is undefined. */
function accepted<T>(f: () => T): T | undefined {
  try {
    return f();
  } catch (err) {
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    return undefined;
  }
}

function expectSafeKey(key: string): void {
  for (const segment of key.split("/")) {
    expect(segment).not.toBe("");
    expect(segment).not.toBe(".");
    expect(segment).not.toBe("..");
    expect(segment).not.toContain("\\");
    expect(segment).not.toMatch(/\p{Cc}/u);
  }
}

/** The key a presigned URL really addresses, after URL normalisation. */
function keyOfUrl(url: string): string {
  const pathname = new URL(url).pathname;
  expect(pathname.startsWith(`/${BUCKET}/`)).toBe(true);
  return pathname
    .slice(BUCKET.length + 2)
    .split("/")
    .map((s) => decodeURIComponent(s))
    .join("/");
}

describe("keys", () => {
  test("an accepted upload stays in its group prefix, also in the presigned URL", async () => {
    await fc.assert(
      fc.asyncProperty(anyText, anyText, async (group, filename) => {
        const key = accepted(() => uploadKey(group, filename));
        if (key === undefined) return;
        expect(key.startsWith(`${group}/`)).toBe(true);
        expect(key.split("/")).toHaveLength(group.split("/").length + 2);
        expect(key.endsWith(`/${filename}`)).toBe(true);
        expectSafeKey(key);
        expect(keyOfUrl(await storage.presignUpload(key, 60))).toBe(key);
      }),
      { numRuns: 2000 },
    );
  });

  test("an accepted upload-dir keeps every relpath under one fresh prefix", async () => {
    await fc.assert(
      fc.asyncProperty(anyText, fc.array(anyText, { maxLength: 4 }), async (group, relpaths) => {
        const result = accepted(() => uploadDirKeys(group, relpaths));
        if (result === undefined) return;
        expect(result.prefix.startsWith(`${group}/`)).toBe(true);
        expect(result.prefix.split("/")).toHaveLength(group.split("/").length + 2);
        expect(new Set(relpaths).size).toBe(relpaths.length);
        result.keys.forEach((key, i) => expect(key).toBe(result.prefix + relpaths[i]));
        for (const key of result.keys) {
          expectSafeKey(key);
          expect(keyOfUrl(await storage.presignUpload(key, 60))).toBe(key);
        }
      }),
      { numRuns: 2000 },
    );
  });

  test("an accepted download path is in the bucket and its URL addresses exactly that key", async () => {
    const paths = fc.oneof(
      anyText.map((rest) => `s3://${BUCKET}/${rest}`),
      anyText.map((rest) => `s3://${BUCKET}${rest}`),
      anyText.map((rest) => `s3://other/${rest}`),
      anyText,
    );
    await fc.assert(
      fc.asyncProperty(paths, async (path) => {
        const key = accepted(() => parseObjectPath(path, BUCKET));
        if (key === undefined) return;
        expect(path).toBe(`s3://${BUCKET}/${key}`);
        expectSafeKey(key);
        expect(keyOfUrl(await storage.presignDownload(key, 60))).toBe(key);
      }),
      { numRuns: 2000 },
    );
  });

  test("the examples of docs/contract/10-object-storage.md", () => {
    expect(uploadKey("site-a/cohort.1", "scan 1.nii.gz")).toMatch(
      /^site-a\/cohort\.1\/[0-9a-f-]{36}\/scan 1\.nii\.gz$/,
    );
    for (const [group, filename] of [
      ["a//b", "f"],
      ["/a", "f"],
      ["a/..", "f"],
      ["a", ".."],
      ["a", "x/y"],
      ["a", "x\\y"],
      ["a", "x\u0007"],
    ] as const) {
      expect(accepted(() => uploadKey(group, filename))).toBeUndefined();
    }
  });
});
