// Hostile and malformed inputs for the fuzz test: strings that have broken
// services before (SQL, paths, encodings, numbers past every range), values
// of every JSON type, deep nesting, and raw garbage.
import fc from "fast-check";

export const hostileStrings = [
  "'; DROP TABLE resources; --",
  '" OR 1=1 --',
  "x' UNION SELECT * FROM pg_shadow --",
  "\u0000",
  "a\u0000b",
  "\ud800",
  "../../etc/passwd",
  "..",
  ".",
  "%00",
  "%zz",
  "${jndi:ldap://x}",
  "<script>alert(1)</script>",
  "__proto__",
  "constructor",
  "prototype",
  "1e999",
  "-0",
  "NaN",
  "Infinity",
  "-Infinity",
  "9223372036854775808",
  "-9223372036854775809",
  "18446744073709551616",
  "0x10",
  "s3://",
  "s3://resources/../../x",
  "s3://other-bucket/key",
  "2024-02-30",
  "9999-12-31T23:59:59.999999999Z",
  "0000-01-01T00:00:00Z",
  "2026-13-01T00:00:00Z",
  "2026-01-01T00:00:00+99:99",
  "\n\r\t",
  "😀",
  "\\",
  "/",
  "//",
  "*",
  "%",
  "_",
  "",
  " ",
  "a".repeat(70_000),
];

const hostileString = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...hostileStrings) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ maxLength: 20 }) },
);

const hostileNumber = fc.oneof(
  fc.integer(),
  fc.constantFrom(0, -1, 2 ** 31, -(2 ** 31) - 1, 2 ** 53 + 1, 1e308, -1e308, 5e-324, 0.5),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
);

/** Any JSON value, biased to the ones that break parsers and validators. */
export const hostileValue: fc.Arbitrary<unknown> = fc.letrec<{ v: unknown }>((tie) => ({
  v: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    hostileString,
    hostileNumber,
    fc.boolean(),
    fc.constant(null),
    fc.array(tie("v"), { maxLength: 4 }),
    fc.dictionary(fc.oneof(hostileString, fc.constantFrom("__proto__", "constructor")), tie("v"), { maxKeys: 4 }),
  ),
})).v;

/** An object whose keys are mostly the message's own field names. */
export function hostileObject(fieldNames: readonly string[]): fc.Arbitrary<Record<string, unknown>> {
  const key =
    fieldNames.length > 0
      ? fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...fieldNames) }, { weight: 1, arbitrary: hostileString })
      : hostileString;
  return fc.dictionary(key, hostileValue, { maxKeys: 5 });
}

/** encodeURIComponent, which throws on a lone surrogate: then the encoding of one. */
export function safeEncode(s: string): string {
  try {
    return encodeURIComponent(s);
  } catch {
    return "%ED%A0%80";
  }
}

const deep = (n: number) => "[".repeat(n) + "]".repeat(n);
const deepObject = (n: number) => '{"a":'.repeat(n) + "1" + "}".repeat(n);

/** Raw bodies that are not the JSON of anything sensible. */
export const rawGarbage = fc.oneof(
  fc.constantFrom(
    "",
    "{",
    "}",
    "null",
    "[]",
    "[1,2,3]",
    '"string"',
    "1e99999",
    '{"a":1,"a":2}',
    '{"__proto__":{"polluted":true}}',
    deep(5000),
    deepObject(5000),
    "\u0000\u0001\u0002",
    "\ufeff{}",
    '{"resources": [' + "{},".repeat(2000) + "{}]}",
  ),
  fc.string({ unit: "binary", maxLength: 200 }),
  fc.json({ maxDepth: 4 }),
);

/** Hostile path segments and query pairs. */
export const hostileSegment = fc.oneof(
  fc.constantFrom(
    "..",
    ".",
    "%2e%2e",
    "%2F",
    "%00",
    "%zz",
    "%",
    "//",
    "a%2Fb",
    "\u00e9",
    safeEncode("'; DROP TABLE x; --"),
    "x".repeat(5000),
  ),
  fc.webSegment(),
  fc.string({ maxLength: 12 }).map(safeEncode),
);

export function hostileQuery(fieldNames: readonly string[]): fc.Arbitrary<string> {
  const key = fc.oneof(fc.constantFrom(...fieldNames, "as_of", "limit", "offset", "__proto__"), fc.webSegment());
  const value = fc.oneof(
    hostileString.map(safeEncode),
    fc.constantFrom("%zz", "%", "-1", "99999999999999999999", "true", "1e3", "x&y", "", "%00"),
  );
  return fc.array(fc.tuple(key, value), { maxLength: 4 }).map((pairs) => pairs.map(([k, v]) => `${k}=${v}`).join("&"));
}
