import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, test } from "vitest";
import { storageError } from "../../src/storage/index.js";

function sdkError(name: string, status: number | undefined, extra: Record<string, unknown> = {}): Error {
  const err = new Error(`${name} at http://10.0.0.7:9000/bucket/secret/key.parquet`);
  Object.assign(err, { name, $metadata: status === undefined ? {} : { httpStatusCode: status }, ...extra });
  return err;
}

describe("storageError", () => {
  test.each([
    ["NoSuchKey", 404, {}, Code.NotFound],
    ["NotFound", 404, {}, Code.NotFound],
    ["NoSuchBucket", 404, {}, Code.Unavailable],
    ["PreconditionFailed", 412, {}, Code.Unavailable],
    ["SlowDown", 503, {}, Code.Unavailable],
    ["InternalError", 500, {}, Code.Unavailable],
    ["Error", undefined, { code: "ECONNREFUSED" }, Code.Unavailable],
    ["Error", undefined, { code: "ENOTFOUND" }, Code.Unavailable],
    ["TimeoutError", undefined, {}, Code.Unavailable],
    ["AccessDenied", 403, {}, Code.Internal],
    ["TypeError", undefined, {}, Code.Internal],
  ])("%s (HTTP %s) -> %s", (name, status, extra, code) => {
    const mapped = storageError(sdkError(name, status, extra));
    expect(Code[mapped.code]).toBe(Code[code]);
    // Hosts, keys and the SDK's text stay in the server.
    expect(mapped.rawMessage).not.toMatch(/10\.0\.0\.7|secret|http/);
  });

  test("a ConnectError passes through unchanged", () => {
    const err = new ConnectError("x", Code.InvalidArgument);
    expect(storageError(err)).toBe(err);
  });
});
