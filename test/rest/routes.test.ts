import { describe, expect, it } from "vitest";
import { buildRouteTable, findRoute, requestTarget, type RouteTable } from "../../src/rest/index.js";
import { revisions } from "../../src/rpc/index.js";

const table = buildRouteTable(revisions);
// The same routes with no index: every route is a candidate of every path.
const scanAll: RouteTable = { ...table, byLead: new Map(), rest: table.routes };

function summary(t: RouteTable, verb: string, path: string) {
  const m = findRoute(t, verb, path);
  if (m.kind === "found")
    return { kind: m.kind, template: m.route.template.source, revision: m.route.revision, bindings: m.bindings };
  return m;
}

describe("route lookup by leading segments", () => {
  const paths = [
    "/resources/read",
    "/v1/resources/read",
    "/v2/resources/read",
    "/v2/query/count",
    "/query",
    "/query/parquet",
    "/parents/stu_1",
    "/v1/parents/stu_1",
    "/parents/stu_1%2Fx",
    "/parents/",
    "/parents",
    "/children",
    "/schemas",
    "/schemas/patient",
    "/s3/config",
    "/s3/presign/batch",
    "/s3/presign/upload-dir",
    "/admin/materialized-views",
    "/datasources/stats",
    "/datasources/detailed-stats",
    // Escaped literals match as their decoded form.
    "/resour%63es/read",
    "/v1/resources/re%61d",
    "/%76%32/query",
    "/resources/%zz",
    "/%zz/read",
    "/",
    "",
    "/nothing/here",
    "/v3/resources/read",
    "/resources/read/extra",
  ];
  for (const verb of ["GET", "POST", "PUT", "DELETE", "PATCH"]) {
    it(`finds for ${verb} what a search of the whole table finds`, () => {
      for (const path of paths)
        expect(summary(table, verb, path), `${verb} ${path}`).toEqual(summary(scanAll, verb, path));
    });
  }

  it("matches an escaped literal, and a wrong verb is told the allowed ones", () => {
    expect(findRoute(table, "POST", "/resour%63es/read")).toMatchObject({ kind: "found" });
    expect(findRoute(table, "GET", "/resources/read")).toEqual({ kind: "wrong-method", allowed: ["POST"] });
    expect(findRoute(table, "GET", "/nothing/here")).toEqual({ kind: "none" });
  });

  it("indexes every route exactly once", () => {
    const indexed = [...table.byLead.values()].flat().concat(table.rest);
    expect(indexed).toHaveLength(table.routes.length);
    expect(new Set(indexed).size).toBe(table.routes.length);
  });
});

describe("request targets", () => {
  const targets = [
    "/resources/read",
    "/v2/query/count",
    "/parents/stu_1-a",
    "//resources/read",
    "/",
    "/a/./b",
    "/a/../resources/read",
    "/a/.",
    "/parents/stu%2F1",
    "/parents/caf\u00e9",
    "/parents/a b",
    "/schemas?payload_type=file",
    "/resources/read#x",
    "/a\\b",
    "/UPPER/lower_9",
  ];
  it("reads a plain path as the URL parser does, and every other one through it", () => {
    for (const raw of targets) {
      const got = requestTarget(raw)!;
      const url = new URL(`http://rest.invalid${raw}`);
      expect({ pathname: got.pathname, href: got.href, query: got.searchParams.toString() }, raw).toEqual({
        pathname: url.pathname,
        href: url.href,
        query: url.searchParams.toString(),
      });
    }
  });

  it("takes a target that is not a path as the root, as before", () => {
    expect(requestTarget("*")?.pathname).toBe("/");
    expect(requestTarget(undefined)?.pathname).toBe("/");
  });
});
