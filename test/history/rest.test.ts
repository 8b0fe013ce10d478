// History and expected versions over REST (docs/contract/19-audit-history.md):
// both revisions' paths, flat resources without children, the limit bounds,
// 404 for an identifier never created or not visible to the caller, and 409
// aborted VERSION_MISMATCH with nothing written.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";

describe("history and expected versions over REST", () => {
  let srv: TestServer;
  const post = async (path: string, body: unknown, token = "tok"): Promise<{ status: number; json: any }> => {
    const res = await fetch(srv.url + path, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: res.status, json: await res.json() };
  };
  beforeAll(async () => {
    srv = await startTestServer({
      API_TOKENS: "tok=read,write;pub=read,clearance:public;dsb=read,datasource:ds-b",
      MAX_QUERY_LIMIT: "50",
    });
    expect(
      (
        await post("/resources/create", {
          resources: [
            { identifier: "ds-a", payload_type: "datasource", name: "A", access_level: "public" },
            {
              identifier: "p1",
              payload_type: "patient",
              datasource_id: "ds-a",
              parent_identifier: "ds-a",
              access_level: "public",
            },
            {
              identifier: "s1",
              payload_type: "study",
              parent_identifier: "p1",
              modality: "CT",
              access_level: "public",
            },
          ],
        })
      ).status,
    ).toBe(200);
  }, 60_000);
  afterAll(async () => srv?.close());

  it("answers flat versions, oldest first, on both revisions, with next_cursor null at the end", async () => {
    expect(
      (await post("/resources/update", { updates: { s1: { modality: "MR", access_level: "internal" } } })).status,
    ).toBe(200);
    expect((await post("/resources/update", { updates: { s1: { access_level: "public" } } })).status).toBe(200);
    for (const path of ["/resources/history", "/v1/resources/history", "/v2/resources/history"]) {
      const { status, json } = await post(path, { identifier: "s1" });
      expect(status, path).toBe(200);
      expect(json.next_cursor).toBeNull();
      expect(json.versions.map((v: any) => [v.version, v.kind, v.actor, v.resource.modality])).toEqual([
        [1, "created", "token#1", "CT"],
        [2, "updated", "token#1", "MR"],
        [3, "updated", "token#1", "MR"],
      ]);
      const r = json.versions[0].resource;
      expect(r).toMatchObject({
        identifier: "s1",
        payload_type: "study",
        parent_identifier: "p1",
        version: 1,
        created_at: json.versions[0].at,
      });
      expect(r.children).toBeUndefined();
    }
    const first = await post("/resources/history", { identifier: "s1", limit: 2 });
    expect(first.json.versions).toHaveLength(2);
    expect(typeof first.json.next_cursor).toBe("string");
    const rest = await post("/resources/history", { identifier: "s1", limit: 2, cursor: first.json.next_cursor });
    expect(rest.json.versions.map((v: any) => v.version)).toEqual([3]);
    expect(rest.json.next_cursor).toBeNull();
    const since = await post("/resources/history", {
      identifier: "s1",
      since: first.json.versions[1].at,
      until: rest.json.versions[0].at,
    });
    expect(since.json.versions.map((v: any) => v.version)).toEqual([2]);
  });

  it("refuses a limit past MAX_QUERY_LIMIT and answers 404 for an identifier never created", async () => {
    expect(await post("/resources/history", { identifier: "s1", limit: 51 })).toMatchObject({
      status: 400,
      json: { reason: "LIMIT_OUT_OF_RANGE" },
    });
    expect(await post("/resources/history", { identifier: "s1", limit: 0 })).toMatchObject({ status: 400 });
    expect(await post("/resources/history", { identifier: "s1", since: "yesterday" })).toMatchObject({ status: 400 });
    expect(await post("/resources/history", { identifier: "never" })).toMatchObject({
      status: 404,
      json: { code: "not_found" },
    });
  });

  it("shows a restricted caller only what it may see: the stricter of then and now", async () => {
    // s1 was internal at version 2: a public-only caller sees versions 1 and 3.
    const pub = await post("/resources/history", { identifier: "s1" }, "pub");
    expect(pub.json.versions.map((v: any) => v.version)).toEqual([1, 3]);
    // A caller of another datasource sees nothing of it: as if never created.
    expect(await post("/resources/history", { identifier: "s1" }, "dsb")).toMatchObject({ status: 404 });
    expect((await post("/resources/history", { identifier: "ds-a" }, "dsb")).status).toBe(404);
    // Raised now: hidden entirely.
    expect((await post("/resources/update", { updates: { s1: { access_level: "restricted" } } })).status).toBe(200);
    expect((await post("/resources/history", { identifier: "s1" }, "pub")).status).toBe(404);
    expect((await post("/resources/history", { identifier: "s1" })).json.versions).toHaveLength(4);
  });

  it("refuses a stale expected_version or expected_versions with 409 aborted, writing nothing", async () => {
    const stale = await post("/resources/update", {
      updates: { p1: { license: "MIT", expected_version: 7 }, "ds-a": { license: "MIT", expected_version: 1 } },
    });
    expect(stale.status).toBe(409);
    expect(stale.json).toMatchObject({ code: "aborted", reason: "VERSION_MISMATCH" });
    expect(stale.json.message).toContain("p1");
    const del = await post("/resources/delete", { identifiers: ["p1"], expected_versions: { p1: 2 } });
    expect(del).toMatchObject({ status: 409, json: { reason: "VERSION_MISMATCH" } });
    const read = await post("/resources/read", { identifiers: ["p1", "ds-a"], exclude_children: true });
    expect(read.json.map((r: any) => [r.identifier, r.version, r.license])).toEqual([
      ["p1", 1, null],
      ["ds-a", 1, null],
    ]);
    expect(
      (await post("/resources/update", { updates: { p1: { license: "MIT", expected_version: 1 } } })).json,
    ).toEqual({ updated: 1 });
    expect((await post("/resources/delete", { identifiers: ["p1"], expected_versions: { p1: 2 } })).json).toEqual({
      deleted: 2,
    });
    expect((await post("/resources/restore", { identifiers: ["p1"], expected_versions: { p1: 2 } })).status).toBe(409);
    expect((await post("/v2/resources/restore", { identifiers: ["p1"], expected_versions: { p1: 3 } })).json).toEqual({
      restored: 2,
    });
  });
});
