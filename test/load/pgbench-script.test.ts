// The load benchmark's pgbench reference runs `-M prepared` (docs/benchmarks/load.md, "Load against prepared floors"), where
// pgbench binds every `:name` of a command as a variable, inside quotes too:
// the script must keep the statement's meaning with its colons out of
// pgbench's reach, and its parameters written in as the values pg sends.
import { describe, expect, it } from "vitest";
import { pgbenchSafe, pgbenchScript } from "../../bench/load.bench.js";

describe("the load benchmark's pgbench script", () => {
  it("writes a string constant holding a colon in escape syntax, the same constant", () => {
    expect(pgbenchSafe(`SELECT to_char(t, 'YYYY-MM-DD"T"HH24:MI:SS') AS a, 'it''s\\ok:x' AS b, 'a:' AS c`)).toBe(
      `SELECT to_char(t, E'YYYY-MM-DD"T"HH24\\x3aMI\\x3aSS') AS a, E'it\\'s\\\\ok\\x3ax' AS b, 'a:' AS c`,
    );
  });

  it("leaves casts alone and refuses a colon pgbench would bind outside a constant", () => {
    expect(pgbenchSafe(`SELECT $1::text[], x::int FROM "t:"`)).toBe(`SELECT $1::text[], x::int FROM "t:"`);
    expect(() => pgbenchSafe("SELECT :x")).toThrow(/bind a variable at :x/);
    expect(() => pgbenchSafe(`SELECT 1 FROM "a:b"`)).toThrow(/identifier "a:b"/);
  });

  it("inlines each call's parameters as literals, one statement a line", () => {
    expect(
      pgbenchScript([
        { sql: "BEGIN", params: undefined },
        {
          sql: "SELECT $1::text[] AS ids, $2::jsonb AS f, $3::int AS n, $10::text AS t, $4::text AS z",
          params: [["a", 'b"c'], { k: "v:w" }, 21, null, 5, 6, 7, 8, 9, "x'y"],
        },
      ]),
    ).toBe(
      `BEGIN;\nSELECT '{"a","b\\"c"}'::text[] AS ids, E'{"k"\\x3a"v\\x3aw"}'::jsonb AS f, 21::int AS n, 'x''y'::text AS t, NULL::text AS z;\n`,
    );
  });
});
