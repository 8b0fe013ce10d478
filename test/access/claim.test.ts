// JWT grant scopes: a malformed one never widens what the caller sees.
import { describe, expect, it } from "vitest";
import { grantsOfClaim } from "../../src/auth/index.js";

const ds = (g: ReturnType<typeof grantsOfClaim>) => (g.datasources === "all" ? "all" : [...g.datasources].sort());

describe("grantsOfClaim", () => {
  it("reads datasource and clearance scopes from scope or scp", () => {
    expect(ds(grantsOfClaim({ scope: "read datasource:a datasource:b clearance:internal" }))).toEqual(["a", "b"]);
    expect(grantsOfClaim({ scp: ["read", "datasource:a", "clearance:public"] }).clearance).toBe("public");
    // No grant in the claim: no datasource and public (docs/contract/18-access.md), never everything.
    expect(ds(grantsOfClaim({ scope: "read" }))).toEqual([]);
    expect(grantsOfClaim({ scope: "read" }).clearance).toBe("public");
  });

  it("a malformed datasource scope alone leaves no datasource, not every one", () => {
    expect(ds(grantsOfClaim({ scope: "read datasource:-bad" }))).toEqual([]);
    expect(ds(grantsOfClaim({ scope: "read datasource:-bad datasource:a" }))).toEqual(["a"]);
    expect(ds(grantsOfClaim({ scope: "read datasource:-bad datasource:*" }))).toBe("all");
  });

  it("a malformed clearance alone leaves public", () => {
    expect(grantsOfClaim({ scope: "read clearance:top" }).clearance).toBe("public");
  });
});
