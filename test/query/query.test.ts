import { Code } from "@connectrpc/connect";
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { beforeAll, describe, expect, it } from "vitest";
import type { JsonValue } from "@bufbuild/protobuf";
import { describeBackends, uid } from "../store/backends.js";
import { expectCode } from "../store/helpers.js";
import { clients, type Clients } from "./harness.js";

const v = (x: JsonValue) => fromJson(ValueSchema, x);
const cond = (field: string, op: string, value?: JsonValue) => ({
  field,
  op,
  ...(value !== undefined ? { value: v(value) } : {}),
});

describeBackends("query", (backend) => {
  let c: Clients;
  let p: string;
  const ids = (r: { results: { identifier: string }[] }) => r.results.map((x) => x.identifier);

  beforeAll(async () => {
    c = clients(backend());
    p = uid("q");
    const root = `${p}-root`;
    await c.resources.create({
      resources: [
        { identifier: root, payload: { case: "datasource", value: { name: "root" } } },
        ...Array.from({ length: 12 }, (_, i) => ({
          identifier: `${p}-s${String(i).padStart(2, "0")}`,
          parentIdentifier: i < 6 ? root : `${p}-s00`,
          license: i % 3 === 0 ? undefined : i % 3 === 1 ? "MIT" : "a_b%c",
          derivedFrom: i % 2 === 0 ? [`${p}-src`] : [],
          payload: {
            case: "series" as const,
            value: {
              modality: i % 2 ? "CT" : "MR",
              seriesNumber: i % 4 === 0 ? undefined : i * 10,
              description: `d${i}`,
            },
          },
        })),
        {
          identifier: `${p}-f1`,
          parentIdentifier: `${p}-s01`,
          payload: { case: "file", value: { path: "s3://b/k", sizeBytes: 9007199254740993n } },
        },
      ],
    });
  });

  const base = () => ({ filters: [cond("identifier", "starts_with", p)] });

  it("filters with typed comparisons, any groups and every op", async () => {
    const r = await c.query.query({
      ...base(),
      payloadType: "series",
      filters: [...base().filters, cond("series_number", "gte", 50)],
      sortBy: "series_number",
      sortOrder: "ASC",
    });
    expect(ids(r)).toEqual([`${p}-s05`, `${p}-s06`, `${p}-s07`, `${p}-s09`, `${p}-s10`, `${p}-s11`]);
    // numbers compare as numbers: 100 > 90 (text would say otherwise)
    const big = await c.query.query({
      ...base(),
      payloadType: "series",
      filters: [...base().filters, cond("series_number", "gt", 90)],
    });
    expect(ids(big).sort()).toEqual([`${p}-s10`, `${p}-s11`]);
    const anyGroup = await c.query.query({
      ...base(),
      payloadType: "series",
      filters: [
        ...base().filters,
        { field: "", op: "", any: [cond("series_number", "eq", 10), cond("modality", "eq", "MR")] },
      ],
      sortBy: "identifier",
      sortOrder: "asc",
    });
    expect(ids(anyGroup)).toEqual([`${p}-s00`, `${p}-s01`, `${p}-s02`, `${p}-s04`, `${p}-s06`, `${p}-s08`, `${p}-s10`]);
    const isNull = await c.query.query({
      ...base(),
      payloadType: "series",
      filters: [...base().filters, cond("series_number", "is_null")],
      sortBy: "identifier",
      sortOrder: "asc",
    });
    expect(ids(isNull)).toEqual([`${p}-s00`, `${p}-s04`, `${p}-s08`]);
    const like = await c.query.query({ ...base(), filters: [...base().filters, cond("license", "contains", "_b%")] });
    expect(ids(like).length).toBe(4);
    const notIn = await c.query.query({
      ...base(),
      filters: [...base().filters, cond("license", "not_in", ["MIT"]), cond("payload_type", "in", ["series"])],
    });
    expect(ids(notIn).length).toBe(8);
    const ne = await c.query.query({ ...base(), filters: [...base().filters, cond("license", "ne", "MIT")] });
    expect(ids(ne).length).toBe(10);
    const member = await c.query.query({
      ...base(),
      filters: [...base().filters, cond("derived_from", "contains", `${p}-src`)],
    });
    expect(ids(member).length).toBe(6);
    const int64 = await c.query.query({
      ...base(),
      payloadType: "file",
      filters: [...base().filters, cond("size_bytes", "gt", "9007199254740992")],
    });
    expect(ids(int64)).toEqual([`${p}-f1`]);
    const ts = await c.query.query({
      ...base(),
      filters: [...base().filters, cond("created_at", "lt", "2000-01-01T00:00:00+01:00")],
    });
    expect(ids(ts)).toEqual([]);
  });

  it("sorts strings by bytes with nulls last ascending and first descending", async () => {
    const asc = await c.query.query({ ...base(), payloadType: "series", sortBy: "series_number", sortOrder: "asc" });
    const nums = asc.results.map((r) => (r.payload.case === "series" ? (r.payload.value.seriesNumber ?? null) : "x"));
    expect(nums).toEqual([10, 20, 30, 50, 60, 70, 90, 100, 110, null, null, null]);
    const desc = await c.query.query({ ...base(), payloadType: "series", sortBy: "series_number", sortOrder: "desc" });
    expect(ids(desc)).toEqual([...ids(asc)].reverse());
    const lic = await c.query.query({ ...base(), sortBy: "license", sortOrder: "asc" });
    const licenses = lic.results.map((r) => r.license ?? null);
    // "MIT" < "a_b%c" in byte order (uppercase first), nulls last
    expect(licenses.slice(0, 4)).toEqual(["MIT", "MIT", "MIT", "MIT"]);
    expect(licenses.at(-1)).toBeNull();
  });

  it("follows parents directly and indirectly, and identifiers", async () => {
    const direct = await c.query.query({ parentIdentifier: `${p}-root` });
    expect(direct.results.length).toBe(6);
    const all = await c.query.query({ parentIdentifier: `${p}-root`, includeIndirectParents: true });
    expect(all.results.length).toBe(13);
    const some = await c.query.query({
      identifiers: [`${p}-s01`, `${p}-f1`, `${p}-none`],
      sortBy: "identifier",
      sortOrder: "asc",
    });
    expect(ids(some)).toEqual([`${p}-f1`, `${p}-s01`]);
    expect((await c.query.count({ parentIdentifier: `${p}-root`, includeIndirectParents: true, limit: 1 })).count).toBe(
      13n,
    );
  });

  it("returns only selected columns", async () => {
    const r = await c.query.query({
      ...base(),
      payloadType: "series",
      selectColumns: ["modality", "license"],
      limit: 1,
      sortBy: "identifier",
      sortOrder: "asc",
    });
    const first = r.results[0];
    expect(first?.identifier).toBe(`${p}-s00`);
    expect(first?.createdAt).toBe("");
    expect(first?.payload.case).toBe("series");
    if (first?.payload.case === "series") {
      expect(first.payload.value.modality).toBe("MR");
      expect(first.payload.value.description).toBeUndefined();
    }
    expect(r.limit).toBe(1);
  });

  it("pages with cursors: every row once, pinned against later writes", async () => {
    const req = { ...base(), sortBy: "license", sortOrder: "desc" };
    const whole = await c.query.query(req);
    expect(whole.nextCursor).toBeUndefined();
    expect(whole.limit).toBeUndefined();
    const seen: string[] = [];
    let page = await c.query.query({ ...req, limit: 5 });
    seen.push(...ids(page));
    await c.resources.create({
      resources: [
        { identifier: `${p}-late`, license: "ZZZ", payload: { case: "datasource", value: { name: "late" } } },
      ],
    });
    while (page.nextCursor !== undefined) {
      page = await c.query.query({ ...req, limit: 4, cursor: page.nextCursor });
      seen.push(...ids(page));
    }
    expect(seen).toEqual(ids(whole));
    expect((await c.query.query(req)).results.length).toBe(whole.results.length + 1);
    await c.resources.delete({ identifiers: [`${p}-late`] });
  });

  it("rejects cursors of other queries, tampered cursors and other as_of", async () => {
    const page = await c.query.query({ ...base(), limit: 2 });
    const cursor = page.nextCursor ?? "";
    expect(cursor).not.toBe("");
    await expectCode(c.query.query({ ...base(), sortOrder: "asc", cursor }), Code.InvalidArgument);
    await expectCode(c.query.query({ ...base(), payloadType: "series", cursor }), Code.InvalidArgument);
    const flipped = cursor.slice(0, 3) + (cursor[3] === "A" ? "B" : "A") + cursor.slice(4);
    await expectCode(c.query.query({ ...base(), cursor: flipped }), Code.InvalidArgument);
    await expectCode(c.query.query({ ...base(), cursor, asOf: "2001-01-01T00:00:00Z" }), Code.InvalidArgument);
    const ok = await c.query.query({ ...base(), cursor, selectColumns: ["license"], limit: 3 });
    expect(ok.results.length).toBe(3);
  });

  it("reads at as_of and counts", async () => {
    const before = (await c.query.query({ ...base(), limit: 1, sortOrder: "asc" })).results[0]?.createdAt ?? "";
    const t = new Date(Date.parse(before) - 1000).toISOString();
    expect((await c.query.query({ ...base(), asOf: t })).results).toEqual([]);
    expect((await c.query.count({ ...base(), asOf: t })).count).toBe(0n);
    const now = (await c.query.count({ ...base() })).count;
    expect((await c.query.count({ ...base(), asOf: "2999-01-01T00:00:00Z" })).count).toBe(now);
    const pages: string[] = [];
    let page = await c.query.query({ ...base(), asOf: "2999-01-01T00:00:00Z", limit: 7 });
    pages.push(...ids(page));
    while (page.nextCursor !== undefined) {
      page = await c.query.query({ ...base(), asOf: "2999-01-01T00:00:00Z", limit: 7, cursor: page.nextCursor });
      pages.push(...ids(page));
    }
    expect(BigInt(pages.length)).toBe(now);
  });

  it("answers invalid_argument for bad requests", async () => {
    const bad = [
      { filters: [cond("nope", "eq", "x")] },
      { filters: [cond("modality", "eq", "x")] },
      { payloadType: "series", filters: [cond("series_number", "eq", "ten")] },
      { payloadType: "series", filters: [cond("series_number", "contains", 1)] },
      { filters: [cond("license", "in", "MIT")] },
      { filters: [cond("license", "like", "MIT")] },
      { filters: [cond("created_at", "gt", "yesterday")] },
      { payloadType: "nope" },
      { sortBy: "derived_from" },
      { sortOrder: "up" },
      { limit: 0 },
      { limit: 10_001 },
      { cursor: "garbage" },
      { selectColumns: ["children"] },
    ];
    for (const req of bad) await expectCode(c.query.query(req), Code.InvalidArgument);
  });
});

describe("query cursor secret", () => {
  it("is shared through the database when not configured", async () => {
    const { migrate } = await import("../../src/store/index.js");
    const { loadCursorSecret } = await import("../../src/store/index.js");
    const { openMemoryStore } = await import("../support/pglite-image.js");
    const db = await openMemoryStore();
    await migrate(db);
    const a = await loadCursorSecret(db, undefined);
    const b = await loadCursorSecret(db, undefined);
    expect(a).toBe(b);
    expect(await loadCursorSecret(db, "configured")).toBe("configured");
    await db.close();
  });
});
