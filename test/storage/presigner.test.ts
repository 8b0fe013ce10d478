// s3rver does not check SigV4 signatures, so the signatures are checked here
// against the AWS SDK's own getSignedUrl: same request, same instant, same URL.
import { GetObjectCommand, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import fc from "fast-check";
import { afterAll, describe, expect, test } from "vitest";
import { createUrlPresigner, uploadKey } from "../../src/storage/index.js";

const BUCKET = "sig-bucket";
const clients: S3Client[] = [];

function client(endpoint: string, forcePathStyle: boolean): S3Client {
  const c = new S3Client({
    endpoint,
    region: "eu-central-1",
    forcePathStyle,
    credentials: { accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY" },
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
  });
  clients.push(c);
  return c;
}

afterAll(() => {
  for (const c of clients) c.destroy();
});

function parts(url: string): { origin: string; pathname: string; query: string[] } {
  const u = new URL(url);
  return {
    origin: u.origin,
    pathname: u.pathname,
    query: [...u.searchParams.entries()].map(([k, v]) => `${k}=${v}`).sort(),
  };
}

const keys = fc
  .tuple(fc.constantFrom("g", "a/b-c/d_e.f"), fc.string({ unit: "grapheme", minLength: 1, maxLength: 12 }))
  .map(([group, filename]) => {
    try {
      return uploadKey(group, filename);
    } catch {
      return undefined;
    }
  })
  .filter((k): k is string => k !== undefined);

describe("presigner", () => {
  for (const [endpoint, pathStyle] of [
    ["http://127.0.0.1:4568", true],
    ["https://s3.example.org", true],
    ["https://s3.example.org:9443", false],
  ] as const) {
    test(`signs exactly as getSignedUrl does (${endpoint}, ${pathStyle ? "path" : "virtual-host"} style)`, async () => {
      const s3 = client(endpoint, pathStyle);
      const presigner = createUrlPresigner(s3, endpoint, BUCKET, pathStyle);
      await fc.assert(
        fc.asyncProperty(keys, fc.integer({ min: 1, max: 7 * 24 * 3600 }), async (key, expiresIn) => {
          const signingDate = new Date(Date.UTC(2026, 10, 21, 23, 5, 1));
          for (const [method, command] of [
            ["PUT", new PutObjectCommand({ Bucket: BUCKET, Key: key })],
            ["GET", new GetObjectCommand({ Bucket: BUCKET, Key: key })],
          ] as const) {
            const ours = await presigner.presign(method, key, expiresIn, signingDate);
            const sdk = await getSignedUrl(s3, command, { expiresIn, signingDate });
            expect(parts(ours)).toEqual(parts(sdk));
          }
        }),
        { numRuns: 200 },
      );
    });
  }
});
