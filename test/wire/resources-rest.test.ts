// docs/contract/01-resources.md, docs/contract/02-mutations.md, docs/contract/03-time.md over the REST surface: the flat codec, the update mask
// built from the keys present, and the service together, as a curl user sees
// them. (The store's own suites cover the same rules through the RPC layer on
// both backends; this proves the REST path keeps them.)
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";
import { restCaller } from "../support/rest.js";

let srv: TestServer;
beforeAll(async () => {
  srv = await startTestServer();
});
afterAll(async () => {
  await srv?.close();
});

const { post } = restCaller(() => srv.url);
const read = async (ids: string[], extra: object = {}) =>
  (await post("/resources/read", { identifiers: ids, ...extra })).json;
const micro = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/;

describe("create", () => {
  it("takes parents from the same batch in any order, and an empty batch", async () => {
    expect(await post("/resources/create", { resources: [] })).toEqual({ status: 200, json: { created: 0 } });
    const r = await post("/resources/create", {
      resources: [
        { identifier: "c-series", parent_identifier: "c-study", payload_type: "series", series_number: 1 },
        { identifier: "c-study", parent_identifier: "c-ds", payload_type: "study", modality: "CT" },
        { identifier: "c-ds", payload_type: "datasource", name: "DS" },
      ],
    });
    expect(r).toEqual({ status: 200, json: { created: 3 } });
    const [ds] = await read(["c-ds"]);
    expect(ds.children).toEqual(["c-study"]);
  });

  it("refuses an active identifier, a dangling parent and duplicates, writing nothing", async () => {
    const cases: [object[], string][] = [
      [[{ identifier: "c-ds", payload_type: "datasource", name: "again" }], "failed_precondition"],
      [[{ identifier: "c-new1", parent_identifier: "nowhere", payload_type: "study" }], "failed_precondition"],
      [
        [
          { identifier: "c-dup", payload_type: "study" },
          { identifier: "c-dup", payload_type: "study" },
        ],
        "invalid_argument",
      ],
      [[{ identifier: "c-new2", payload_type: "study", colour: "red" }], "invalid_argument"],
      [[{ identifier: "c-new3", payload_type: "nope" }], "invalid_argument"],
      [[{ identifier: "c-new4", payload_type: "datasource" }], "invalid_argument"],
    ];
    for (const [resources, code] of cases) {
      const ok = { identifier: "c-ok", payload_type: "study" };
      const r = await post("/resources/create", { resources: [ok, ...resources] });
      expect(r.status, JSON.stringify(resources)).toBe(400);
      expect(r.json.code).toBe(code);
      expect(typeof r.json.message).toBe("string");
    }
    expect(await read(["c-ok", "c-dup", "c-new1", "c-new2"])).toEqual([]);
  });

  it("refuses unknown top-level keys", async () => {
    const r = await post("/resources/create", { resources: [], extra: 1 });
    expect(r.status).toBe(400);
    expect(r.json.code).toBe("invalid_argument");
  });
});

describe("read", () => {
  it("answers in input order with repeats, skips missing, and leaves children out on request", async () => {
    const rows = await read(["c-study", "missing", "c-ds", "c-study"]);
    expect(rows.map((r: any) => r.identifier)).toEqual(["c-study", "c-ds", "c-study"]);
    const [noKids] = await read(["c-ds"], { exclude_children: true });
    expect(noKids).not.toHaveProperty("children");
    expect(noKids.created_at).toMatch(micro);
  });

  it("rejects an as_of that is not RFC 3339 and accepts offsets", async () => {
    expect((await post("/resources/read", { identifiers: ["c-ds"], as_of: "yesterday" })).status).toBe(400);
    expect((await post("/resources/read", { identifiers: ["c-ds"], as_of: "2026-11-21 10:00:00" })).status).toBe(400);
    const [ds] = await read(["c-ds"]);
    const r = await post("/resources/read", { identifiers: ["c-ds"], as_of: "2999-01-01T01:00:00+01:00" });
    expect(r.status).toBe(200);
    expect(r.json[0].identifier).toBe(ds.identifier);
  });
});

describe("update", () => {
  it("changes only the keys present; null clears; derived_from replaces; no payload_type needed", async () => {
    await post("/resources/create", {
      resources: [
        {
          identifier: "u-1",
          payload_type: "study",
          modality: "CT",
          description: "d",
          license: "L",
          derived_from: ["a", "b"],
        },
      ],
    });
    const r = await post("/resources/update", {
      updates: { "u-1": { modality: "MR", description: null, license: null, derived_from: ["c"] } },
    });
    expect(r).toEqual({ status: 200, json: { updated: 1 } });
    const [u] = await read(["u-1"]);
    expect(u).toMatchObject({ modality: "MR", license: null, derived_from: ["c"], version: 2, payload_type: "study" });
    expect(u).not.toHaveProperty("description");
  });

  it("refuses a payload_type change, a field the type lacks, a required field set to null and unknown identifiers, applying nothing", async () => {
    await post("/resources/create", { resources: [{ identifier: "u-ds", payload_type: "datasource", name: "N" }] });
    const good = { "u-1": { modality: "XA" } };
    const cases: [object, string][] = [
      [{ "u-ds": { payload_type: "study" } }, "failed_precondition"],
      [{ "u-ds": { modality: "CT" } }, "invalid_argument"],
      [{ "u-ds": { name: null } }, "invalid_argument"],
      [{ "u-missing": { license: "x" } }, "failed_precondition"],
      [{ "u-ds": { parent_identifier: "u-ds" } }, "invalid_argument"],
    ];
    for (const [updates, code] of cases) {
      const r = await post("/resources/update", { updates: { ...good, ...updates } });
      expect(r.status, JSON.stringify(updates)).toBe(400);
      expect(r.json.code, JSON.stringify(updates)).toBe(code);
    }
    const [u] = await read(["u-1"]);
    expect(u.modality).toBe("MR");
    expect(u.version).toBe(2);
  });

  it("refuses a cycle through other resources", async () => {
    await post("/resources/create", {
      resources: [
        { identifier: "cy-a", payload_type: "study" },
        { identifier: "cy-b", parent_identifier: "cy-a", payload_type: "series" },
      ],
    });
    const r = await post("/resources/update", { updates: { "cy-a": { parent_identifier: "cy-b" } } });
    expect(r.status).toBe(400);
    expect(r.json.code).toBe("failed_precondition");
  });

  it("tombstones and restores through is_deleted, and refuses other changes to a tombstone", async () => {
    await post("/resources/create", { resources: [{ identifier: "u-t", payload_type: "annotation", label: "x" }] });
    expect((await post("/resources/update", { updates: { "u-t": { is_deleted: true } } })).json).toEqual({
      updated: 1,
    });
    expect(await read(["u-t"])).toEqual([]);
    const refused = await post("/resources/update", { updates: { "u-t": { label: "y" } } });
    expect(refused.status).toBe(400);
    expect(refused.json.code).toBe("failed_precondition");
    const back = await post("/resources/update", { updates: { "u-t": { is_deleted: false, label: "y" } } });
    expect(back.json).toEqual({ updated: 1 });
    const [t] = await read(["u-t"]);
    expect(t).toMatchObject({ label: "y", version: 3 });
  });
});

describe("delete, restore and history", () => {
  it("tombstones a subtree, counts it, keeps history, and v2 restore undoes exactly that delete", async () => {
    await post("/resources/create", {
      resources: [
        { identifier: "d-root", payload_type: "datasource", name: "R" },
        { identifier: "d-a", parent_identifier: "d-root", payload_type: "study" },
        { identifier: "d-b", parent_identifier: "d-a", payload_type: "series" },
        { identifier: "d-c", parent_identifier: "d-root", payload_type: "study" },
      ],
    });
    // d-c was deleted by an earlier delete: a restore of d-root must not bring it back.
    expect((await post("/resources/delete", { identifiers: ["d-c"] })).json).toEqual({ deleted: 1 });
    const [before] = await read(["d-root"]);
    const del = await post("/resources/delete", { identifiers: ["d-root", "d-missing"] });
    expect(del.json).toEqual({ deleted: 3 });
    expect(await read(["d-root", "d-a", "d-b"])).toEqual([]);
    expect((await post("/resources/delete", { identifiers: ["d-root"] })).json).toEqual({ deleted: 0 });
    const past = await read(["d-root", "d-a"], { as_of: before.updated_at });
    expect(past.map((r: any) => r.identifier)).toEqual(["d-root", "d-a"]);
    // At d-root's creation d-c was still active: it is a child at that instant.
    expect(past[0].children).toEqual(["d-a", "d-c"]);

    const v1 = await post("/v1/resources/restore", { identifiers: ["d-root"] });
    expect(v1.status).toBe(404);
    const restored = await post("/resources/restore", { identifiers: ["d-root"] });
    expect(restored.json).toEqual({ restored: 3 });
    expect((await read(["d-root", "d-a", "d-b", "d-c"])).map((r: any) => r.identifier)).toEqual([
      "d-root",
      "d-a",
      "d-b",
    ]);
    const [root] = await read(["d-root"]);
    expect(root.version).toBe(3);
  });

  it("creates over a tombstone with a new created_at, continuing the version, history intact", async () => {
    await post("/resources/create", { resources: [{ identifier: "re-1", payload_type: "study", modality: "CT" }] });
    const [first] = await read(["re-1"]);
    await post("/resources/delete", { identifiers: ["re-1"] });
    const again = await post("/resources/create", {
      resources: [{ identifier: "re-1", payload_type: "dataset", name: "now a dataset" }],
    });
    expect(again.json).toEqual({ created: 1 });
    const [second] = await read(["re-1"]);
    expect(second).toMatchObject({ payload_type: "dataset", version: 3 });
    expect(second.created_at > first.created_at).toBe(true);
    const [old] = await read(["re-1"], { as_of: first.created_at });
    expect(old).toMatchObject({ payload_type: "study", modality: "CT", version: 1 });
  });
});
