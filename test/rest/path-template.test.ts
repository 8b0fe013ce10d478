import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { matchPathTemplate, parsePathTemplate, decodeRestRequest } from "../../src/rest/index.js";
import { ChildrenRequestSchema, ParentsRequestSchema } from "../../gen/resourcestore/type/v1/lineage_pb.js";
import { ParquetPreviewRequestSchema } from "../../gen/resourcestore/type/v1/storage_pb.js";
import { ReadRequestSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";

function match(template: string, path: string) {
  const m = matchPathTemplate(parsePathTemplate(template), path);
  return m && Object.fromEntries(m.map((b) => [b.fieldPath.join("."), b.value]));
}

describe("path templates", () => {
  it("matches literals exactly", () => {
    expect(match("/s3/presign/batch", "/s3/presign/batch")).toEqual({});
    expect(match("/s3/presign/batch", "/s3/presign")).toBeUndefined();
    expect(match("/s3/presign", "/s3/presign/batch")).toBeUndefined();
    expect(match("/s3/presign", "/s3/presign/")).toBeUndefined();
  });

  it("binds {var} to one decoded segment", () => {
    expect(match("/parents/{identifier}", "/parents/stu_9%3Ax")).toEqual({ identifier: "stu_9:x" });
    expect(match("/parents/{identifier}", "/parents/a/b")).toBeUndefined();
    expect(match("/parents/{identifier}", "/parents/")).toBeUndefined();
  });

  it("binds {var=prefix/*} and {var=**} across segments", () => {
    expect(match("/v1/{name=shelves/*}/books", "/v1/shelves/s1/books")).toEqual({ name: "shelves/s1" });
    expect(match("/files/{path=**}", "/files/a/b/c.txt")).toEqual({ path: "a/b/c.txt" });
    expect(match("/things/{a.b}", "/things/x")).toEqual({ "a.b": "x" });
  });

  it("matches a verb suffix", () => {
    expect(match("/resources/{id}:restore", "/resources/r1:restore")).toEqual({ id: "r1" });
    expect(match("/resources/{id}:restore", "/resources/r1")).toBeUndefined();
  });

  it("rejects templates it cannot serve", () => {
    expect(() => parsePathTemplate("no-slash")).toThrow();
    expect(() => parsePathTemplate("/a/**/b")).toThrow();
    expect(() => parsePathTemplate("/a/{x")).toThrow();
  });

  it("answers 400 for a variable that is not valid percent-encoding", () => {
    expect(() => match("/parents/{identifier}", "/parents/%zz")).toThrow(ConnectError);
  });
});

function invalid(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    return (err as ConnectError).rawMessage;
  }
  throw new Error("expected invalid_argument");
}

const q = (s: string) => new URLSearchParams(s);

describe("query parameters typed from the descriptor", () => {
  it("types bools, int32, int64 and strings", () => {
    const c = decodeRestRequest(ChildrenRequestSchema, {
      bindings: [],
      query: q("parent_identifier=p1&with_payloads=true&as_of=2026-01-01T00:00:00Z"),
      body: undefined,
      bodyField: "",
    });
    expect(c.parentIdentifier).toBe("p1");
    expect(c.withPayloads).toBe(true);
    expect(c.asOf).toBe("2026-01-01T00:00:00Z");
    const p = decodeRestRequest(ParquetPreviewRequestSchema, {
      bindings: [],
      query: q("path=s3://b/k&limit=5&offset=9007199254740993"),
      body: undefined,
      bodyField: "",
    });
    expect(p.limit).toBe(5);
    expect(p.offset).toBe(9007199254740993n);
    expect(
      decodeRestRequest(ChildrenRequestSchema, {
        bindings: [],
        query: q("with_payloads=false"),
        body: undefined,
        bodyField: "",
      }).withPayloads,
    ).toBe(false);
  });

  it("reads repeated fields from repeated parameters", () => {
    const r = decodeRestRequest(ReadRequestSchema, {
      bindings: [],
      query: q("identifiers=a&identifiers=b&identifiers=c"),
      body: undefined,
      bodyField: "",
    });
    expect(r.identifiers).toEqual(["a", "b", "c"]);
  });

  it("rejects bad values naming the parameter", () => {
    expect(
      invalid(() =>
        decodeRestRequest(ChildrenRequestSchema, {
          bindings: [],
          query: q("with_payloads=yes"),
          body: undefined,
          bodyField: "",
        }),
      ),
    ).toContain("with_payloads");
    expect(
      invalid(() =>
        decodeRestRequest(ParquetPreviewRequestSchema, {
          bindings: [],
          query: q("limit=1.5"),
          body: undefined,
          bodyField: "",
        }),
      ),
    ).toContain("limit");
    expect(
      invalid(() =>
        decodeRestRequest(ParquetPreviewRequestSchema, {
          bindings: [],
          query: q("limit=3000000000"),
          body: undefined,
          bodyField: "",
        }),
      ),
    ).toContain("limit");
    expect(
      invalid(() =>
        decodeRestRequest(ParquetPreviewRequestSchema, {
          bindings: [],
          query: q("offset=ten"),
          body: undefined,
          bodyField: "",
        }),
      ),
    ).toContain("offset");
    expect(
      invalid(() =>
        decodeRestRequest(ParquetPreviewRequestSchema, {
          bindings: [],
          query: q("limit=1&limit=2"),
          body: undefined,
          bodyField: "",
        }),
      ),
    ).toContain("limit");
  });

  it("rejects unknown parameters, message-typed ones, and any parameter when the body covers every field", () => {
    expect(
      invalid(() =>
        decodeRestRequest(ChildrenRequestSchema, {
          bindings: [],
          query: q("colour=red"),
          body: undefined,
          bodyField: "",
        }),
      ),
    ).toContain("colour");
    expect(
      invalid(() =>
        decodeRestRequest(QueryRequestSchema, { bindings: [], query: q("filters=x"), body: undefined, bodyField: "" }),
      ),
    ).toContain("filters");
    expect(
      invalid(() =>
        decodeRestRequest(ReadRequestSchema, { bindings: [], query: q("as_of=now"), body: {}, bodyField: "*" }),
      ),
    ).toContain("as_of");
  });

  it("does not take a path-bound field from the query", () => {
    const bindings = [{ fieldPath: ["identifier"], value: "r1" }];
    expect(
      decodeRestRequest(ParentsRequestSchema, {
        bindings,
        query: q("as_of=2026-01-01T00:00:00Z"),
        body: undefined,
        bodyField: "",
      }).identifier,
    ).toBe("r1");
    expect(
      invalid(() =>
        decodeRestRequest(ParentsRequestSchema, {
          bindings,
          query: q("identifier=r2"),
          body: undefined,
          bodyField: "",
        }),
      ),
    ).toContain("identifier");
  });
});

describe("request bodies", () => {
  it("names unknown keys at any depth and rejects non-objects", () => {
    expect(
      invalid(() =>
        decodeRestRequest(ReadRequestSchema, {
          bindings: [],
          query: q(""),
          body: { identifiers: [], colour: 1 },
          bodyField: "*",
        }),
      ),
    ).toContain('"colour"');
    expect(
      invalid(() =>
        decodeRestRequest(QueryRequestSchema, {
          bindings: [],
          query: q(""),
          body: { filters: [{ field: "x", op: "eq", valu: 1 }] },
          bodyField: "*",
        }),
      ),
    ).toContain("filters[0].valu");
    expect(
      invalid(() => decodeRestRequest(ReadRequestSchema, { bindings: [], query: q(""), body: [1], bodyField: "*" })),
    ).toContain("object");
    expect(
      invalid(() =>
        decodeRestRequest(ReadRequestSchema, {
          bindings: [],
          query: q(""),
          body: { identifiers: "x" },
          bodyField: "*",
        }),
      ),
    ).toContain("identifiers");
  });

  it("keeps a JSON null filter value as a Value", () => {
    const r = decodeRestRequest(QueryRequestSchema, {
      bindings: [],
      query: q(""),
      body: { filters: [{ field: "license", op: "eq", value: null }] },
      bodyField: "*",
    });
    expect(r.filters[0]?.value?.kind.case).toBe("nullValue");
  });
});
