// Section 18 on the paths a history model does not reach
// (docs/contract/18-access.md): the registry, parquet previews of objects,
// and writes by a caller with narrow grants, on both backends.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { writeFixture } from "../storage/parquet-fixture.js";

const pgOk = await postgresReachable();

const TOKENS = [
  "tok-w=write",
  "tok-full=read",
  "tok-a=read,datasource:ds-1,clearance:internal",
  "tok-aw=write,datasource:ds-1,clearance:internal",
  "tok-c=read,datasource:*,clearance:public",
  "tok-admin=admin,datasource:ds-2,clearance:public",
].join(";");

type Json = any;

function suite(kind: "pglite" | "postgres") {
  let server: TestServer;
  let testDb: TestDatabase | undefined;
  const call = async (
    token: string,
    method: "GET" | "POST",
    path: string,
    body?: unknown,
  ): Promise<{ status: number; json: Json }> => {
    const res = await fetch(server.url + path, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    let json: Json;
    try {
      json = JSON.parse(text);
    } catch {
      json = text;
    }
    return { status: res.status, json };
  };
  const post = (token: string, path: string, body: unknown) => call(token, "POST", path, body);

  beforeAll(async () => {
    if (kind === "postgres") testDb = await createTestDatabase();
    server = await startTestServer({ API_TOKENS: TOKENS, ...(testDb ? { DATABASE_URL: testDb.url } : {}) });
    const created = await post("tok-w", "/resources/create", {
      resources: [
        { identifier: "ds-1", payload_type: "datasource", name: "one", access_level: "public" },
        { identifier: "ds-2", payload_type: "datasource", name: "two", access_level: "public" },
        {
          identifier: "p1",
          payload_type: "patient",
          parent_identifier: "ds-1",
          datasource_id: "ds-1",
          access_level: "internal",
        },
        {
          identifier: "p1r",
          payload_type: "patient",
          parent_identifier: "ds-1",
          datasource_id: "ds-1",
          access_level: "restricted",
        },
        {
          identifier: "p2",
          payload_type: "patient",
          parent_identifier: "ds-2",
          datasource_id: "ds-2",
          access_level: "public",
        },
        { identifier: "s1", payload_type: "study", parent_identifier: "p1", access_level: "internal" },
        { identifier: "s1r", payload_type: "study", parent_identifier: "p1", access_level: "restricted" },
        { identifier: "s2", payload_type: "study", parent_identifier: "p2", access_level: "public" },
      ],
    });
    expect(created.status, JSON.stringify(created.json)).toBe(200);
  });
  afterAll(async () => {
    await server?.close();
    await testDb?.drop();
  });

  it("registers only into granted datasources and resolves as not registered outside them", async () => {
    const reg1 = await post("tok-w", "/patients/register", { datasource_id: "ds-1", external_uid: "MRN-1" });
    const reg2 = await post("tok-w", "/patients/register", { datasource_id: "ds-2", external_uid: "MRN-2" });
    expect([reg1.status, reg2.status]).toEqual([200, 200]);
    // A writer limited to ds-1 may register there, not in ds-2.
    expect((await post("tok-aw", "/patients/register", { datasource_id: "ds-1", external_uid: "MRN-3" })).status).toBe(
      200,
    );
    const refused = await post("tok-aw", "/patients/register", { datasource_id: "ds-2", external_uid: "MRN-4" });
    expect(refused.status).toBe(403);
    expect(refused.json.code).toBe("permission_denied");
    // Resolving: the caller granted ds-1 finds MRN-1; for MRN-2 it gets the answer of an unregistered uid.
    const a1 = await post("tok-a", "/patients/resolve", { datasource_id: "ds-1", external_uid: "MRN-1" });
    expect(a1).toEqual({ status: 200, json: { identifier: reg1.json.identifier } });
    const a2 = await post("tok-a", "/patients/resolve", { datasource_id: "ds-2", external_uid: "MRN-2" });
    const unknown = await post("tok-a", "/patients/resolve", { datasource_id: "ds-2", external_uid: "MRN-never" });
    expect(a2.status).toBe(unknown.status);
    expect(a2.json.code).toBe(unknown.json.code);
    expect(a2.json.reason).toBe(unknown.json.reason);
    // Studies of a patient outside the grants: as not registered too.
    const st = await post("tok-w", "/studies/register", {
      patient_identifier: reg2.json.identifier,
      external_uid: "ACC-1",
    });
    expect(st.status).toBe(200);
    const sa = await post("tok-a", "/studies/resolve", {
      patient_identifier: reg2.json.identifier,
      external_uid: "ACC-1",
    });
    expect(sa.status).toBe(400);
    expect(sa.json.code).toBe("failed_precondition");
  });

  it("previews a parquet object only for a caller who may see the dataset whose path it is", async () => {
    const up = await post("tok-w", "/s3/presign", { direction: "upload", group: "access", filename: "d.parquet" });
    expect(up.status).toBe(200);
    const put = await fetch(up.json.url as string, { method: "PUT", body: writeFixture(20, 10).bytes });
    expect(put.status).toBe(200);
    const path = up.json.path as string;
    const preview = (token: string) => call(token, "GET", `/s3/parquet?path=${encodeURIComponent(path)}&limit=5`);
    // No resource names the object yet: only a caller with every datasource at restricted may preview it.
    expect((await preview("tok-full")).status).toBe(200);
    expect((await preview("tok-a")).status).toBe(404);
    expect((await preview("tok-c")).status).toBe(404);
    // A dataset under patient p1 (ds-1, internal) names it: ds-1 internal sees it, public clearance does not.
    expect(
      (
        await post("tok-w", "/resources/create", {
          resources: [
            {
              identifier: "set-1",
              payload_type: "dataset",
              parent_identifier: "p1",
              name: "d",
              path,
              access_level: "internal",
            },
          ],
        })
      ).status,
    ).toBe(200);
    expect((await preview("tok-a")).status).toBe(200);
    expect((await preview("tok-c")).status).toBe(404);
    // Raised to restricted: hidden again, presign download too.
    expect(
      (await post("tok-w", "/resources/update", { updates: { "set-1": { access_level: "restricted" } } })).status,
    ).toBe(200);
    expect((await preview("tok-a")).status).toBe(404);
    expect((await post("tok-a", "/s3/presign", { direction: "download", path })).status).toBe(404);
  });

  it("writes by a narrow writer touch only what it may see, and reveal no more than reads", async () => {
    // Under a parent the writer may not see: answered as a missing parent, as for one that does not exist.
    const hiddenParent = await post("tok-aw", "/resources/create", {
      resources: [{ identifier: "x-foreign", payload_type: "study", parent_identifier: "p2", access_level: "public" }],
    });
    const noParent = await post("tok-aw", "/resources/create", {
      resources: [
        { identifier: "x-none", payload_type: "study", parent_identifier: "p-never", access_level: "public" },
      ],
    });
    expect([hiddenParent.status, hiddenParent.json.reason]).toEqual([noParent.status, noParent.json.reason]);
    // Creating into a foreign datasource, or above the clearance: 403, nothing written.
    const foreign = await post("tok-aw", "/resources/create", {
      resources: [
        { identifier: "x-foreign-p", payload_type: "patient", datasource_id: "ds-2", access_level: "public" },
      ],
    });
    expect(foreign.status).toBe(403);
    const tooHigh = await post("tok-aw", "/resources/create", {
      resources: [{ identifier: "x-high", payload_type: "study", parent_identifier: "p1", access_level: "restricted" }],
    });
    expect(tooHigh.status).toBe(403);
    const mixed = await post("tok-aw", "/resources/create", {
      resources: [
        { identifier: "x-ok", payload_type: "study", parent_identifier: "p1", access_level: "internal" },
        { identifier: "x-bad", payload_type: "patient", datasource_id: "ds-2", access_level: "public" },
      ],
    });
    expect(mixed.status).toBe(403);
    expect(
      (
        await post("tok-full", "/resources/read", {
          identifiers: ["x-foreign", "x-foreign-p", "x-high", "x-ok", "x-bad"],
        })
      ).json,
    ).toEqual([]);
    // Updating a hidden resource answers as an unknown identifier does.
    const hidden = await post("tok-aw", "/resources/update", { updates: { s2: { description: "x" } } });
    const unknown = await post("tok-aw", "/resources/update", { updates: { "no-such": { description: "x" } } });
    expect([hidden.status, hidden.json.code, hidden.json.reason]).toEqual([
      unknown.status,
      unknown.json.code,
      unknown.json.reason,
    ]);
    // Raising a visible one beyond the clearance, or moving a patient into a foreign datasource: 403.
    expect(
      (await post("tok-aw", "/resources/update", { updates: { s1: { access_level: "restricted" } } })).status,
    ).toBe(403);
    expect((await post("tok-aw", "/resources/update", { updates: { p1: { datasource_id: "ds-2" } } })).status).toBe(
      403,
    );
    // Moving one under a parent the writer may not see answers as a parent that does not exist.
    const underHidden = await post("tok-aw", "/resources/update", { updates: { s1: { parent_identifier: "p2" } } });
    const underNone = await post("tok-aw", "/resources/update", { updates: { s1: { parent_identifier: "p-never" } } });
    expect([underHidden.status, underHidden.json.reason]).toEqual([underNone.status, underNone.json.reason]);
    // A cascading delete of p1 tombstones only what the narrow writer sees below it, and counts that.
    const del = await post("tok-aw", "/resources/delete", { identifiers: ["p1", "s2"], cascade: true });
    expect(del.status).toBe(200);
    // p1 and s1 (s1r is restricted, set-1 is restricted; s2 is hidden: skipped).
    expect(del.json).toEqual({ deleted: 2 });
    const left = await post("tok-full", "/resources/read", {
      identifiers: ["p1", "s1", "s1r", "set-1", "s2"],
      exclude_children: true,
    });
    expect((left.json as Json[]).map((r) => r.identifier)).toEqual(["s1r", "set-1", "s2"]);
  });

  it("admin grants nothing beyond its own grants", async () => {
    const r = await post("tok-admin", "/resources/read", {
      identifiers: ["ds-1", "ds-2", "p2", "s2"],
      exclude_children: true,
    });
    expect((r.json as Json[]).map((x) => x.identifier)).toEqual(["ds-2", "p2", "s2"]);
    const q = await post("tok-admin", "/query/count", {});
    expect(q.json.count).toBe(3);
  });
}

describe("access on the other paths [pglite]", () => suite("pglite"));
describe.skipIf(!pgOk)("access on the other paths [postgres]", () => suite("postgres"));
