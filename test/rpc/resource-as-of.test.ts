import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { optionalAsOf, parseAsOf } from "../../src/time.js";

describe("as_of parsing", () => {
  it("accepts Z or an offset, with 0 to 9 fractional digits, truncating to microseconds", () => {
    expect(parseAsOf("2026-11-21T23:05:01Z")).toBe("2026-11-21T23:05:01.000000+00:00");
    expect(parseAsOf("2026-11-21t23:05:01.1z")).toBe("2026-11-21T23:05:01.100000+00:00");
    expect(parseAsOf("2026-11-21T23:05:01.123456789+05:30")).toBe("2026-11-21T23:05:01.123456+05:30");
    expect(parseAsOf("2024-02-29T00:00:00-00:00")).toBe("2024-02-29T00:00:00.000000-00:00");
    expect(optionalAsOf(undefined)).toBeUndefined();
  });

  it.each([
    "2026-11-21",
    "2026-11-21T23:05:01",
    "2026-11-21 23:05:01Z",
    "2026-11-21T23:05:01.1234567890Z",
    "2026-02-29T00:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-11-21T24:00:00Z",
    "2026-11-21T23:60:00Z",
    "2026-11-21T23:05:01+2:00",
    "2026-11-21T23:05:01+24:00",
    "0000-01-01T00:00:00Z",
    "now",
    "1700000000",
    "",
  ])("refuses %j with invalid_argument", (value) => {
    let caught: unknown;
    try {
      optionalAsOf(value);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(ConnectError);
    expect((caught as ConnectError).code).toBe(Code.InvalidArgument);
  });
});
