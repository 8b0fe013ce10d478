// Every version records who wrote it (docs/contract/19-audit-history.md):
// every kind of write (create, update, update is_deleted true and false,
// cascading delete, cascading restore) through every surface (REST
// unprefixed and on each revision, Connect, gRPC and gRPC-Web on each
// revision) with every kind of credential (a static token with actor:, one
// without, an OIDC JWT, authentication off), read back from the history
// table and through History. The first revision has no Restore: there the
// writes end with the cascading delete.
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { ResourceService as ResourceServiceV1 } from "../../gen/resourcestore/v1/resource_service_pb.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { startProvider, type TestProvider } from "../auth/oidc-provider.js";

type Surface = "rest" | "rest-v1" | "rest-v2" | `${"connect" | "grpc" | "grpc-web"}-${"v1" | "v2"}`;
const SURFACES: readonly Surface[] = [
  "rest",
  "rest-v1",
  "rest-v2",
  "connect-v1",
  "connect-v2",
  "grpc-v1",
  "grpc-v2",
  "grpc-web-v1",
  "grpc-web-v2",
];
/** Whether a surface has Restore (the second revision's). */
const restores = (surface: Surface): boolean => !surface.endsWith("v1");

/** The writes of one identifier pair (root r, child c), each as (surface, token) would send it. */
interface Writer {
  create(ids: { root: string; child: string }): Promise<void>;
  update(id: string, change: Record<string, unknown>): Promise<void>;
  delete(id: string): Promise<void>;
  restore(id: string): Promise<void>;
  history(id: string): Promise<{ version: number; actor: string; kind: string }[]>;
}

function writer(srv: TestServer, surface: Surface, token: string | undefined): Writer {
  const headers: Record<string, string> = token === undefined ? {} : { authorization: `Bearer ${token}` };
  if (surface.startsWith("rest")) {
    const prefix = surface === "rest" ? "" : `/${surface.slice("rest-".length)}`;
    const post = async (path: string, body: unknown): Promise<any> => {
      const res = await fetch(srv.url + prefix + path, {
        method: "POST",
        headers: { ...headers, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const json = await res.json();
      if (res.status !== 200) throw new Error(`${path}: ${res.status} ${JSON.stringify(json)}`);
      return json;
    };
    return {
      create: async ({ root, child }) =>
        void (await post("/resources/create", {
          resources: [
            { identifier: root, payload_type: "datasource", name: "D" },
            { identifier: child, payload_type: "study", parent_identifier: root },
          ],
        })),
      update: async (id, change) => void (await post("/resources/update", { updates: { [id]: change } })),
      delete: async (id) => void (await post("/resources/delete", { identifiers: [id] })),
      restore: async (id) => void (await post("/resources/restore", { identifiers: [id] })),
      history: async (id) => (await post("/resources/history", { identifier: id })).versions,
    };
  }
  const transport = surface.startsWith("grpc-web")
    ? createGrpcWebTransport({ baseUrl: srv.url, httpVersion: "1.1" })
    : surface.startsWith("grpc")
      ? createGrpcTransport({ baseUrl: srv.url })
      : createConnectTransport({ baseUrl: srv.url, httpVersion: "1.1" });
  // The first revision's service is the second's without Restore (the same messages).
  const client: Client<typeof ResourceService> = restores(surface)
    ? createClient(ResourceService, transport)
    : (createClient(ResourceServiceV1, transport) as unknown as Client<typeof ResourceService>);
  return {
    create: async ({ root, child }) =>
      void (await client.create(
        {
          resources: [
            { identifier: root, payload: { case: "datasource", value: { name: "D" } } },
            { identifier: child, parentIdentifier: root, payload: { case: "study", value: {} } },
          ],
        },
        { headers },
      )),
    update: async (id, change) => {
      const u =
        "is_deleted" in change
          ? { isDeleted: change["is_deleted"] as boolean }
          : { license: change["license"] as string };
      await client.update({ updates: { [id]: u } }, { headers });
    },
    delete: async (id) => void (await client.delete({ identifiers: [id] }, { headers })),
    restore: async (id) => void (await client.restore({ identifiers: [id] }, { headers })),
    history: async (id) =>
      (await client.history({ identifier: id }, { headers })).versions.map((v) => ({
        version: Number(v.version),
        actor: v.actor,
        kind: v.kind,
      })),
  };
}

/** Every kind of write on r (root) and c (child) the surface has; the expected history of each. */
async function everyWrite(w: Writer, root: string, child: string, restore: boolean): Promise<void> {
  await w.create({ root, child }); // r1 c1 created
  await w.update(root, { license: "MIT" }); // r2 updated
  await w.update(child, { is_deleted: true }); // c2 deleted
  await w.update(child, { is_deleted: false }); // c3 restored
  await w.delete(root); // r3 c4 deleted (cascade)
  if (restore) await w.restore(root); // r4 c5 restored (cascade)
}

const ROOT_KINDS = ["created", "updated", "deleted", "restored"];
const CHILD_KINDS = ["created", "deleted", "restored", "deleted", "restored"];
/** The kinds a surface's writes leave: without Restore, all but the last. */
const kinds = (all: readonly string[], restore: boolean): string[] => (restore ? [...all] : all.slice(0, -1));

async function actorsOf(srv: TestServer, id: string): Promise<string[]> {
  const { rows } = await srv.app.db.query<{ actor: string }>(
    "SELECT actor FROM resource_history WHERE identifier = $1 ORDER BY version",
    [id],
  );
  return rows.map((r) => r.actor);
}

describe("the actor of every write, every surface, every credential", () => {
  let idp: TestProvider;
  let srv: TestServer;
  let off: TestServer;
  let jwt: string;
  beforeAll(async () => {
    idp = await startProvider();
    srv = await startTestServer({
      API_TOKENS: "tok-alice=read,write,actor:alice;tok-plain=read,write",
      OIDC_ISSUER: idp.issuer,
      OIDC_AUDIENCE: "rs",
    });
    off = await startTestServer();
    // Grants in the token: a JWT without them sees no datasource (docs/contract/18-access.md).
    jwt = await idp.sign({ sub: "carol", scope: "read write datasource:* clearance:restricted" }, { audience: "rs" });
  }, 60_000);
  afterAll(async () => {
    await srv?.close();
    await off?.close();
    await idp?.close();
  });

  const credentials = [
    { name: "a static token with actor:", token: () => "tok-alice", actor: "alice", server: () => srv },
    { name: "a static token without one", token: () => "tok-plain", actor: "token#2", server: () => srv },
    { name: "an OIDC JWT", token: () => jwt, actor: "oidc:carol", server: () => srv },
    { name: "authentication off", token: () => undefined, actor: "local", server: () => off },
  ];

  for (const cred of credentials) {
    for (const surface of SURFACES) {
      it(`${cred.name} over ${surface}`, async () => {
        const s = cred.server();
        const w = writer(s, surface, cred.token());
        const root = `r-${surface}-${cred.actor.replace(/[#:]/g, "")}`;
        const child = `c-${surface}-${cred.actor.replace(/[#:]/g, "")}`;
        const restore = restores(surface);
        await everyWrite(w, root, child, restore);
        const rootKinds = kinds(ROOT_KINDS, restore);
        const childKinds = kinds(CHILD_KINDS, restore);
        expect(await actorsOf(s, root)).toEqual(rootKinds.map(() => cred.actor));
        expect(await actorsOf(s, child)).toEqual(childKinds.map(() => cred.actor));
        const h = await w.history(child);
        expect(h.map((v) => [v.version, v.kind, v.actor])).toEqual(childKinds.map((k, i) => [i + 1, k, cred.actor]));
        expect((await w.history(root)).map((v) => [v.kind, v.actor])).toEqual(rootKinds.map((k) => [k, cred.actor]));
      });
    }
  }

  it("a second writer's versions carry its own actor, the first's keep theirs", async () => {
    const a = writer(srv, "rest", "tok-alice");
    const b = writer(srv, "grpc-web-v2", jwt);
    await a.create({ root: "mix-r", child: "mix-c" });
    await b.update("mix-c", { license: "CC0" });
    await a.delete("mix-r");
    await b.restore("mix-r");
    expect(await actorsOf(srv, "mix-c")).toEqual(["alice", "oidc:carol", "alice", "oidc:carol"]);
    expect((await b.history("mix-c")).map((v) => `${v.kind}:${v.actor}`)).toEqual([
      "created:alice",
      "updated:oidc:carol",
      "deleted:alice",
      "restored:oidc:carol",
    ]);
  });
});
