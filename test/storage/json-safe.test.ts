import { describe, expect, test } from "vitest";
import { bigintToJson, formatDate, formatTimestamp, toJsonSafe } from "../../src/storage/index.js";

describe("JSON-safe values", () => {
  test("an int64 is a number only when a double holds it exactly", () => {
    expect(bigintToJson(42n)).toBe(42);
    expect(bigintToJson(-(2n ** 53n))).toBe(-(2 ** 53));
    expect(bigintToJson(2n ** 53n + 1n)).toBe("9007199254740993");
    expect(bigintToJson(2n ** 60n)).toBe(2 ** 60);
    expect(bigintToJson(-(2n ** 63n) + 1n)).toBe("-9223372036854775807");
  });

  test("timestamps keep their precision, also before 1970", () => {
    expect(formatTimestamp(1_700_000_000_123_456n, 1_000_000n, 6)).toBe("2023-11-14T22:13:20.123456Z");
    expect(formatTimestamp(-1n, 1_000_000n, 6)).toBe("1969-12-31T23:59:59.999999Z");
    expect(formatTimestamp(-1n, 1_000n, 6)).toBe("1969-12-31T23:59:59.999000Z");
    expect(formatTimestamp(10n ** 18n * 9n, 1_000n, 6)).toBe("9000000000000000000");
    expect(formatDate(0)).toBe("1970-01-01");
    expect(formatDate(-1)).toBe("1969-12-31");
  });

  test("bytes are base64, nested values JSON, non-finite doubles strings", () => {
    expect(
      toJsonSafe({
        b: new Uint8Array([0, 255, 1]),
        list: [1n, undefined, Number.NEGATIVE_INFINITY],
        map: new Map([["k", { deep: 2n ** 64n + 1n }]]),
        typed: new Int32Array([1, 2]),
      }),
    ).toEqual({ b: "AP8B", list: [1, null, "-Infinity"], map: { k: { deep: "18446744073709551617" } }, typed: [1, 2] });
  });
});
