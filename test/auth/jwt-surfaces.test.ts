// Identity, end to end, against a local identity provider started here
// (discovery, JWKS, a `/token` endpoint that issues the scopes a client asks
// for), on every surface (REST, Connect JSON and binary, gRPC, gRPC-Web):
// - a user logging in with fewer scopes sees less, never more
//   (docs/contract/18-access.md), and with OIDC_GRANTS_CLAIM the grants
//   follow the user's assignments, not the client's request;
// - an open change feed (Watch, GET /events) ends with unauthenticated when
//   its token expires (docs/contract/12-authentication.md);
// - WhoAmI answers the caller's actor, scopes and grants (never the
//   token) on every surface and in both revisions;
// - a 401 is logged with its method, path and status, also for a path no
//   operation has.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";
import { IdentityService as IdentityV1 } from "../../gen/resourcestore/v1/identity_service_pb.js";
import { IdentityService } from "../../gen/resourcestore/v2/identity_service_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { WatchRequestSchema } from "../../gen/resourcestore/type/v1/event_pb.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { logLines, type LogLines } from "../support/log-lines.js";
import { startProvider, type TestProvider } from "./oidc-provider.js";

type Surface = "rest" | "connect-json" | "connect-binary" | "grpc" | "grpc-web";
const SURFACES: readonly Surface[] = ["rest", "connect-json", "connect-binary", "grpc", "grpc-web"];

const AUD = "resource-store";
const ADMIN = "tok-admin";
const ALL_IDS = ["ds-a", "ds-b", "pa", "pb", "sa-internal"];

let idp: TestProvider;
let srv: TestServer;
let claimSrv: TestServer;
let log: LogLines;

beforeAll(async () => {
  idp = await startProvider();
  // Allowed to be issued: read, hospital-a, public. Assigned (the `grants` claim): hospital-b at internal.
  idp.addUser("alice", {
    allowed: ["openid", "read", "datasource:ds-a", "clearance:public"],
    assigned: ["datasource:ds-b", "clearance:internal"],
  });
  log = logLines("info");
  const env = { API_TOKENS: `${ADMIN}=write`, OIDC_ISSUER: idp.issuer, OIDC_AUDIENCE: AUD, EVENTS_HEARTBEAT_MS: "200" };
  srv = await startTestServer(env, {}, log.logger);
  claimSrv = await startTestServer({ ...env, OIDC_GRANTS_CLAIM: "grants" });
  for (const s of [srv, claimSrv]) {
    const res = await fetch(`${s.url}/resources/create`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      body: JSON.stringify({
        resources: [
          { identifier: "ds-a", payload_type: "datasource", name: "A", access_level: "public" },
          { identifier: "ds-b", payload_type: "datasource", name: "B", access_level: "public" },
          {
            identifier: "pa",
            payload_type: "patient",
            parent_identifier: "ds-a",
            datasource_id: "ds-a",
            access_level: "public",
          },
          {
            identifier: "pb",
            payload_type: "patient",
            parent_identifier: "ds-b",
            datasource_id: "ds-b",
            access_level: "public",
          },
          { identifier: "sa-internal", payload_type: "study", parent_identifier: "pa", access_level: "internal" },
        ],
      }),
    });
    expect(res.status, await res.text()).toBe(200);
  }
}, 60_000);
afterAll(async () => {
  await srv?.close();
  await claimSrv?.close();
  await idp?.close();
});

function transportOf(s: TestServer, surface: Exclude<Surface, "rest">): Transport {
  if (surface === "grpc") return createGrpcTransport({ baseUrl: s.url });
  if (surface === "grpc-web") return createGrpcWebTransport({ baseUrl: s.url, httpVersion: "1.1" });
  return createConnectTransport({ baseUrl: s.url, httpVersion: "1.1", useBinaryFormat: surface === "connect-binary" });
}

/** The identifiers of ALL_IDS the token reads, sorted. */
async function visible(s: TestServer, surface: Surface, token: string): Promise<string[]> {
  if (surface === "rest") {
    const res = await fetch(`${s.url}/resources/read`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ identifiers: ALL_IDS, exclude_children: true }),
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { identifier: string }[]).map((r) => r.identifier).sort();
  }
  const client = createClient(ResourceService, transportOf(s, surface));
  const res = await client.read(
    { identifiers: ALL_IDS, excludeChildren: true },
    { headers: { authorization: `Bearer ${token}` } },
  );
  return res.resources.map((r) => r.identifier).sort();
}

describe("a token that asks for less", () => {
  it.each(SURFACES)("sees less, never more, over %s", async (surface) => {
    const asked = await idp.login("alice", "openid read datasource:ds-a clearance:public", AUD);
    const less = await idp.login("alice", "openid read", AUD);
    expect(await visible(srv, surface, asked)).toEqual(["ds-a", "pa"]);
    // No grant in the token: no datasource (a datasource node belongs to the datasource it names), where it once saw everything.
    expect(await visible(srv, surface, less)).toEqual([]);
    expect(await visible(srv, surface, ADMIN)).toEqual([...ALL_IDS].sort());
  });

  it.each(SURFACES)(
    "with OIDC_GRANTS_CLAIM, sees what the user is assigned whatever it asks for, over %s",
    async (surface) => {
      for (const scope of ["openid read", "openid read datasource:ds-a clearance:public"]) {
        const token = await idp.login("alice", scope, AUD);
        expect(await visible(claimSrv, surface, token)).toEqual(["ds-b", "pb"]);
      }
    },
  );
});

/** WhoAmI over a surface and a revision, as flat JSON (REST) or the message's JSON names (RPC). */
async function whoAmI(surface: Surface, revision: "v1" | "v2" | "", token: string): Promise<Record<string, unknown>> {
  if (surface === "rest") {
    const res = await fetch(`${srv.url}${revision === "" ? "" : `/${revision}`}/whoami`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(res.status).toBe(200);
    return (await res.json()) as Record<string, unknown>;
  }
  const client = createClient(revision === "v1" ? IdentityV1 : IdentityService, transportOf(srv, surface));
  const r = await client.whoAmI({}, { headers: { authorization: `Bearer ${token}` } });
  return {
    actor: r.actor,
    scopes: r.scopes,
    grants: {
      all_datasources: r.grants?.allDatasources,
      datasources: r.grants?.datasources,
      clearance: r.grants?.clearance,
    },
    authenticated: r.authenticated,
    ...(r.expiresAt === undefined ? {} : { expires_at: r.expiresAt }),
  };
}

describe("WhoAmI", () => {
  it.each(SURFACES)("names the caller, its scopes and grants, never the token, over %s", async (surface) => {
    const jwt = await idp.login("alice", "openid read datasource:ds-a clearance:public", AUD);
    for (const revision of surface === "rest" ? (["", "v1", "v2"] as const) : (["v1", "v2"] as const)) {
      const me = await whoAmI(surface, revision, jwt);
      expect(me).toMatchObject({
        actor: "oidc:alice",
        scopes: ["read"],
        grants: { all_datasources: false, datasources: ["ds-a"], clearance: "public" },
        authenticated: true,
      });
      expect(me.expires_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
      expect(Date.parse(String(me.expires_at))).toBeGreaterThan(Date.now());
      expect(JSON.stringify(me)).not.toContain(jwt.split(".")[2]);
      const admin = await whoAmI(surface, revision, ADMIN);
      expect(admin).toMatchObject({
        actor: "token#1",
        scopes: ["read", "write"],
        grants: { all_datasources: true, datasources: [], clearance: "restricted" },
        authenticated: true,
      });
      expect(admin).not.toHaveProperty("expires_at");
      expect(JSON.stringify(admin)).not.toContain(ADMIN);
    }
  });
});

/** How a Watch (or GET /events) opened with `token` ended: its code, after every message was read. */
async function feedEnd(surface: Surface, token: string): Promise<{ code: string; messages: number }> {
  let messages = 0;
  if (surface === "rest") {
    const res = await fetch(`${srv.url}/events`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    const text = await res.text();
    messages = (text.match(/^id: /gm) ?? []).length;
    const error = /^event: error\ndata: (.*)$/m.exec(text);
    return { code: error === null ? "ok" : (JSON.parse(error[1] as string) as { code: string }).code, messages };
  }
  const client = createClient(EventService, transportOf(srv, surface));
  try {
    for await (const _ of client.watch(create(WatchRequestSchema, {}), {
      headers: { authorization: `Bearer ${token}` },
    }))
      messages += 1;
    return { code: "ok", messages };
  } catch (err) {
    return { code: Code[ConnectError.from(err).code], messages };
  }
}

describe("an open feed", () => {
  it("ends with unauthenticated when its token expires, on every surface", async () => {
    // Valid when the streams open; expired (with the 5 s tolerance) a few seconds later.
    const exp = Math.floor(Date.now() / 1000) + 2;
    const token = await idp.sign(
      { sub: "feed-reader", scope: "read datasource:* clearance:restricted" },
      { audience: AUD, expiresIn: exp },
    );
    const ends = await Promise.all(SURFACES.map((s) => feedEnd(s, token)));
    expect(ends.map((e) => e.code)).toEqual(
      SURFACES.map((s) => (s === "rest" ? "unauthenticated" : "Unauthenticated")),
    );
    // Each had been streaming (heartbeats) before it ended.
    for (const e of ends) expect(e.messages).toBeGreaterThan(0);
    // And a token that never expires (a static one) keeps its stream: the end above was the token's.
    const client = createClient(EventService, transportOf(srv, "grpc"));
    let n = 0;
    for await (const _ of client.watch(create(WatchRequestSchema, {}), {
      headers: { authorization: `Bearer ${ADMIN}` },
    }))
      if (++n === 3) break;
    expect(n).toBe(3);
  }, 30_000);
});

describe("a 401", () => {
  it("is logged with method, path and status: for a REST call and for a path no operation has", async () => {
    const rest = await fetch(`${srv.url}/resources/read`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-request-id": "i46-rest-401" },
      body: "{}",
    });
    const unknown = await fetch(`${srv.url}/no/such/path`, { headers: { "x-request-id": "i46-unknown-401" } });
    expect([rest.status, unknown.status]).toEqual([401, 401]);
    // The line is written when the answer has gone out.
    await expect
      .poll(
        () => log.records().filter((r) => r.request_id === "i46-rest-401" || r.request_id === "i46-unknown-401").length,
      )
      .toBe(2);
    const records = log.records();
    expect(records.filter((r) => r.request_id === "i46-rest-401")).toEqual([
      expect.objectContaining({
        msg: "call",
        rpc: "resourcestore.v2.ResourceService/Read",
        code: "Unauthenticated",
        method: "POST",
        path: "/resources/read",
        status: 401,
      }),
    ]);
    expect(records.filter((r) => r.request_id === "i46-unknown-401")).toEqual([
      expect.objectContaining({
        msg: "http",
        code: "Unauthenticated",
        method: "GET",
        path: "/no/such/path",
        status: 401,
      }),
    ]);
  });
});

describe("the provider's keys, through the service", () => {
  it("a flood of tokens naming unknown keys costs the provider a request or two, and a rotated key is accepted on every surface", async () => {
    const before = idp.hits.get("/keys") ?? 0;
    const flood = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        idp.sign({ sub: "x", scope: "read" }, { audience: AUD, kid: `forged-${i}` }),
      ),
    );
    const statuses = await Promise.all(
      flood.map(
        async (t) =>
          (
            await fetch(`${srv.url}/resources/read`, {
              method: "POST",
              headers: { authorization: `Bearer ${t}`, "content-type": "application/json" },
              body: "{}",
            })
          ).status,
      ),
    );
    expect(new Set(statuses)).toEqual(new Set([401]));
    expect((idp.hits.get("/keys") ?? 0) - before).toBeLessThanOrEqual(2);
    await idp.rotate();
    const token = await idp.sign({ sub: "rotated", scope: "read datasource:ds-a clearance:public" }, { audience: AUD });
    for (const surface of SURFACES) expect(await visible(srv, surface, token)).toEqual(["ds-a", "pa"]);
  }, 30_000);
});
