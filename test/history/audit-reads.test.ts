// Issue 41, requirement 3: every audited read path (docs/contract/19-audit-history.md)
// on every surface (REST, Connect JSON and binary, gRPC, gRPC-Web), called
// by callers who get an answer and by callers who are refused, writes
// exactly one line naming the right actor, with `ok` only when the caller
// got an answer:
// - a token that authenticates but lacks the method's scope (a static read
//   token on the registry's writes and the online dump, a JWT without
//   `read` on everything) is refused permission_denied, and its line names
//   its actor (`oidc:<sub>` for the JWT): the auth interceptor names the
//   actor before it checks the scope. On the code before this test the
//   line's actor was null;
// - a token that does not authenticate (unknown static token, a JWT signed
//   by a key the provider never published) is refused at the front door,
//   before its body: one line, actor null, unauthenticated;
// - after the run, no line holds a planted payload value, external uid,
//   object path or cursor.
import { ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminService } from "../../gen/resourcestore/v1/admin_service_pb.js";
import { ArtefactService } from "../../gen/resourcestore/v1/artefact_service_pb.js";
import { EventService as EventServiceV1 } from "../../gen/resourcestore/v1/event_service_pb.js";
import { LineageService as LineageServiceV1 } from "../../gen/resourcestore/v1/lineage_service_pb.js";
import { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";
import { LineageService } from "../../gen/resourcestore/v2/lineage_service_pb.js";
import { QueryService } from "../../gen/resourcestore/v2/query_service_pb.js";
import { RegistryService } from "../../gen/resourcestore/v2/registry_service_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { StatsService } from "../../gen/resourcestore/v2/stats_service_pb.js";
import { StorageService } from "../../gen/resourcestore/v2/storage_service_pb.js";
import { isAudited } from "../../src/rpc/index.js";
import { startProvider, type TestProvider } from "../auth/oidc-provider.js";
import { writeFixture } from "../storage/parquet-fixture.js";
import { startTestServer, type TestServer } from "../support/app.js";

const AUD = "resource-store";
const ACC = "ACC-MARK-6120";
const SECRET = "PAYLOAD-MARK-2291";
const UID = "UID-MARK-8145";
const PATH_MARK = "PATHMARK3307";
const SINCE = "2000-01-01T00:00:00Z";
/** A query whose first page leaves a cursor (st-1 and st-2 match): the cursor's second page is asked with the same filter. */
const ACC_QUERY = { payload_type: "study", limit: 1, filters: [{ field: "accession_number", op: "starts_with", value: ACC }] };

interface Line {
  actor: string | null;
  method: string;
  outcome: string;
  count: number | null;
}

type Surface = "rest" | "connect-json" | "connect-binary" | "grpc" | "grpc-web";
const SURFACES: readonly Surface[] = ["rest", "connect-json", "connect-binary", "grpc", "grpc-web"];

function transportOf(srv: TestServer, surface: Exclude<Surface, "rest">): Transport {
  if (surface === "grpc") return createGrpcTransport({ baseUrl: srv.url });
  if (surface === "grpc-web") return createGrpcWebTransport({ baseUrl: srv.url, httpVersion: "1.1" });
  return createConnectTransport({ baseUrl: srv.url, httpVersion: "1.1", useBinaryFormat: surface === "connect-binary" });
}

/** Values the cases need, known once the fixtures are written. */
interface Fixture {
  path: string;
  cursor: string;
  patient: string;
  seq: number;
}

/** One audited read path: its method (service/method, as isAudited names it), an RPC call and its REST request. */
interface Case {
  readonly method: string;
  readonly scope: "read" | "write" | "admin";
  readonly rpc: (t: Transport, h: { headers: Record<string, string> }, f: Fixture) => Promise<unknown> | AsyncIterable<unknown>;
  readonly rest: (f: Fixture) => { verb: "GET" | "POST"; path: string; body?: unknown };
}

const q = (path: string) => encodeURIComponent(path);
const fresh = (f: Fixture) => `${UID}-${++f.seq}`;

const CASES: readonly Case[] = [
  { method: "ResourceService/Read", scope: "read", rpc: (t, h) => createClient(ResourceService, t).read({ identifiers: ["st-1"] }, h), rest: () => ({ verb: "POST", path: "/resources/read", body: { identifiers: ["st-1"] } }) },
  { method: "ResourceService/History", scope: "read", rpc: (t, h) => createClient(ResourceService, t).history({ identifier: "st-1" }, h), rest: () => ({ verb: "POST", path: "/resources/history", body: { identifier: "st-1" } }) },
  {
    method: "QueryService/Query",
    scope: "read",
    rpc: (t, h, f) => createClient(QueryService, t).query({ payloadType: "study", limit: 1, cursor: f.cursor, filters: [{ field: "accession_number", op: "starts_with", value: { kind: { case: "stringValue", value: ACC } } }] }, h),
    rest: (f) => ({ verb: "POST", path: "/query", body: { ...ACC_QUERY, cursor: f.cursor } }),
  },
  {
    method: "QueryService/Count",
    scope: "read",
    rpc: (t, h) => createClient(QueryService, t).count({ payloadType: "study", filters: [{ field: "description", op: "contains", value: { kind: { case: "stringValue", value: SECRET } } }] }, h),
    rest: () => ({ verb: "POST", path: "/query/count", body: { payload_type: "study", filters: [{ field: "description", op: "contains", value: SECRET }] } }),
  },
  {
    method: "QueryService/QueryParquet",
    scope: "read",
    rpc: (t, h, f) => createClient(QueryService, t).queryParquet({ payloadType: "study", limit: 1, cursor: f.cursor, filters: [{ field: "accession_number", op: "starts_with", value: { kind: { case: "stringValue", value: ACC } } }] }, h),
    rest: (f) => ({ verb: "POST", path: "/query/parquet", body: { ...ACC_QUERY, cursor: f.cursor } }),
  },
  { method: "LineageService/Children", scope: "read", rpc: (t, h) => createClient(LineageServiceV1, t).children({ parentIdentifier: "pa-a" }, h), rest: () => ({ verb: "GET", path: "/children?parent_identifier=pa-a" }) },
  { method: "LineageService/Parents", scope: "read", rpc: (t, h) => createClient(LineageService, t).parents({ identifier: "st-1" }, h), rest: () => ({ verb: "GET", path: "/parents/st-1" }) },
  {
    method: "ArtefactService/Latest",
    scope: "read",
    rpc: (t, h) => createClient(ArtefactService, t).latest({ repo: "r", branch: "main", path: "m.onnx" }, h),
    rest: () => ({ verb: "GET", path: "/v1/artefacts/latest?repo=r&branch=main&path=m.onnx" }),
  },
  { method: "StatsService/Stats", scope: "read", rpc: (t, h) => createClient(StatsService, t).stats({}, h), rest: () => ({ verb: "GET", path: "/datasources/stats" }) },
  {
    method: "StatsService/DetailedStats",
    scope: "read",
    rpc: (t, h) => createClient(StatsService, t).detailedStats({ datasourceId: "ds-a" }, h),
    rest: () => ({ verb: "GET", path: "/datasources/detailed-stats?datasource_id=ds-a" }),
  },
  // Both feeds: the v2 and v1 revisions of Watch (REST: GET /events and GET /v1/events, Server-Sent Events).
  { method: "EventService/Watch", scope: "read", rpc: (t, h) => createClient(EventService, t).watch({ since: SINCE }, h), rest: () => ({ verb: "GET", path: `/events?since=${q(SINCE)}` }) },
  { method: "EventService/Watch", scope: "read", rpc: (t, h) => createClient(EventServiceV1, t).watch({ since: SINCE }, h), rest: () => ({ verb: "GET", path: `/v1/events?since=${q(SINCE)}` }) },
  // The online backup (admin).
  { method: "AdminService/Dump", scope: "admin", rpc: (t, h) => createClient(AdminService, t).dump({}, h), rest: () => ({ verb: "GET", path: "/admin/dump" }) },
  {
    method: "RegistryService/RegisterPatient",
    scope: "write",
    rpc: (t, h, f) => createClient(RegistryService, t).registerPatient({ datasourceId: "ds-a", externalUid: fresh(f) }, h),
    rest: (f) => ({ verb: "POST", path: "/patients/register", body: { datasource_id: "ds-a", external_uid: fresh(f) } }),
  },
  {
    method: "RegistryService/ResolvePatient",
    scope: "read",
    rpc: (t, h) => createClient(RegistryService, t).resolvePatient({ datasourceId: "ds-a", externalUid: UID }, h),
    rest: () => ({ verb: "POST", path: "/patients/resolve", body: { datasource_id: "ds-a", external_uid: UID } }),
  },
  {
    method: "RegistryService/RegisterStudy",
    scope: "write",
    rpc: (t, h, f) => createClient(RegistryService, t).registerStudy({ patientIdentifier: f.patient, externalUid: fresh(f) }, h),
    rest: (f) => ({ verb: "POST", path: "/studies/register", body: { patient_identifier: f.patient, external_uid: fresh(f) } }),
  },
  {
    method: "RegistryService/ResolveStudy",
    scope: "read",
    rpc: (t, h, f) => createClient(RegistryService, t).resolveStudy({ patientIdentifier: f.patient, externalUid: `${UID}-s` }, h),
    rest: (f) => ({ verb: "POST", path: "/studies/resolve", body: { patient_identifier: f.patient, external_uid: `${UID}-s` } }),
  },
  {
    method: "StorageService/Presign",
    scope: "read",
    rpc: (t, h, f) => createClient(StorageService, t).presign({ direction: "download", path: f.path }, h),
    rest: (f) => ({ verb: "POST", path: "/s3/presign", body: { direction: "download", path: f.path } }),
  },
  {
    method: "StorageService/PresignBatch",
    scope: "read",
    rpc: (t, h, f) => createClient(StorageService, t).presignBatch({ direction: "download", items: [{ path: f.path }] }, h),
    rest: (f) => ({ verb: "POST", path: "/s3/presign/batch", body: { direction: "download", items: [{ path: f.path }] } }),
  },
  {
    method: "StorageService/ParquetPreview",
    scope: "read",
    rpc: (t, h, f) => createClient(StorageService, t).parquetPreview({ path: f.path, limit: 3 }, h),
    rest: (f) => ({ verb: "GET", path: `/s3/parquet?path=${q(f.path)}&limit=3` }),
  },
  {
    method: "StorageService/List",
    scope: "read",
    rpc: (t, h, f) => createClient(StorageService, t).list({ prefix: f.path.slice(0, f.path.lastIndexOf("/") + 1) }, h),
    rest: (f) => ({ verb: "GET", path: `/s3/list?prefix=${q(f.path.slice(0, f.path.lastIndexOf("/") + 1))}` }),
  },
];

/**
 * Makes the call and answers whether the caller got an answer: a unary
 * answer, a stream's first message (a stream is left after it: the feeds do
 * not end), a REST 200 with its first bytes.
 */
async function answered(srv: TestServer, surface: Surface, c: Case, token: string, f: Fixture): Promise<boolean> {
  if (surface === "rest") {
    const r = c.rest(f);
    const abort = new AbortController();
    const res = await fetch(srv.url + r.path, {
      method: r.verb,
      signal: abort.signal,
      headers: { authorization: `Bearer ${token}`, ...(r.body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(r.body !== undefined ? { body: JSON.stringify(r.body) } : {}),
    });
    const reader = res.body?.getReader();
    const first = await reader?.read();
    abort.abort();
    await reader?.cancel().catch(() => undefined);
    return res.status === 200 && first !== undefined && first.done !== true;
  }
  const h = { headers: { authorization: `Bearer ${token}` } };
  try {
    const out = c.rpc(transportOf(srv, surface), h, f);
    if (Symbol.asyncIterator in Object(out)) {
      for await (const _ of out as AsyncIterable<unknown>) return true;
      return true;
    }
    await out;
    return true;
  } catch (err) {
    if (!(err instanceof ConnectError)) throw err;
    return false;
  }
}

let idp: TestProvider;
let srv: TestServer;
const written: string[] = [];
const lines = (): Line[] => written.map((l) => JSON.parse(l) as Line);
const fixture: Fixture = { path: "", cursor: "", patient: "", seq: 0 };
/** Calls made through `oneLine`: each must have added exactly one line by the end. */
let calls = 0;

/** The one line a call added: waits (bounded) for it, since a refusal's line may follow its answer by a tick. */
async function oneLine(run: () => Promise<boolean>): Promise<{ line: Line; answered: boolean }> {
  const before = written.length;
  const got = await run();
  calls++;
  for (let i = 0; i < 200 && written.length === before; i++) await new Promise((r) => setTimeout(r, 10));
  const added = lines().slice(before);
  expect(added).toHaveLength(1);
  return { line: added[0] as Line, answered: got };
}

beforeAll(async () => {
  idp = await startProvider();
  srv = await startTestServer(
    {
      API_TOKENS: "tok-admin=admin,actor:keeper;tok-r=read,actor:reader",
      OIDC_ISSUER: idp.issuer,
      OIDC_AUDIENCE: AUD,
    },
    {
      auditSink: (line) => {
        written.push(line);
        return Promise.resolve();
      },
    },
  );
  const call = async (path: string, body: unknown) => {
    const res = await fetch(srv.url + path, { method: "POST", headers: { authorization: "Bearer tok-admin", "content-type": "application/json" }, body: JSON.stringify(body) });
    const text = await res.text();
    expect(res.status, text).toBe(200);
    return JSON.parse(text) as Record<string, unknown>;
  };
  const up = (await call("/s3/presign", { direction: "upload", group: "audit", filename: `${PATH_MARK}.parquet` })) as { url: string; path: string };
  expect((await fetch(up.url, { method: "PUT", body: writeFixture(12, 4).bytes })).status).toBe(200);
  fixture.path = up.path;
  await call("/resources/create", {
    resources: [
      { identifier: "ds-a", payload_type: "datasource", name: "A" },
      { identifier: "pa-a", payload_type: "patient", parent_identifier: "ds-a", datasource_id: "ds-a" },
      { identifier: "st-1", payload_type: "study", parent_identifier: "pa-a", accession_number: ACC, description: SECRET },
      { identifier: "st-2", payload_type: "study", parent_identifier: "pa-a", accession_number: `${ACC}-2` },
      { identifier: "st-3", payload_type: "study", parent_identifier: "pa-a" },
      { identifier: "fi-1", payload_type: "dataset", parent_identifier: "st-1", name: "d", path: fixture.path },
      { identifier: "ar-1", payload_type: "artefact", parent_identifier: "ds-a", repo: "r", branch: "main", path: "m.onnx", status: "succeeded" },
    ],
  });
  fixture.patient = String((await call("/patients/register", { datasource_id: "ds-a", external_uid: UID }))["identifier"]);
  await call("/studies/register", { patient_identifier: fixture.patient, external_uid: `${UID}-s` });
  fixture.cursor = String((await call("/query", ACC_QUERY))["next_cursor"]);
  expect(fixture.cursor.length).toBeGreaterThan(8);
  written.length = 0;
}, 60_000);
afterAll(async () => {
  await srv?.close();
  await idp?.close();
});

describe("every audited read on every surface: one line, the right actor, ok only when answered (issue 41)", () => {
  it("the cases cover every audited method", () => {
    for (const c of CASES) expect(isAudited(...(c.method.split("/") as [string, string])), c.method).toBe(true);
    const services = { AdminService, ArtefactService, EventService, LineageService, LineageServiceV1, QueryService, RegistryService, ResourceService, StatsService, StorageService };
    const covered = new Set(CASES.map((c) => c.method));
    for (const svc of Object.values(services)) for (const m of svc.methods) if (isAudited(svc.name, m.name)) expect(covered, `${svc.name}/${m.name}`).toContain(`${svc.name}/${m.name}`);
  });

  for (const surface of SURFACES) {
    it(`a caller holding the scope is answered, with its actor and ok, over ${surface}`, async () => {
      for (const c of CASES) {
        const { line, answered: got } = await oneLine(() => answered(srv, surface, c, "tok-admin", fixture));
        expect(got, c.method).toBe(true);
        expect(line.method.endsWith(`.${c.method}`), `${c.method}: ${line.method}`).toBe(true);
        expect(line, c.method).toMatchObject({ actor: "keeper", outcome: "ok" });
      }
    });

    it(`a static token without the method's scope is refused, with its actor, over ${surface}`, async () => {
      for (const c of CASES.filter((x) => x.scope !== "read")) {
        const { line, answered: got } = await oneLine(() => answered(srv, surface, c, "tok-r", fixture));
        expect(got, c.method).toBe(false);
        expect(line, c.method).toMatchObject({ actor: "reader", outcome: "permission_denied", count: 0 });
      }
    });

    it(`a JWT without the read scope is refused, with its oidc: actor, over ${surface}`, async () => {
      const jwt = await idp.sign({ sub: "carol", scope: "openid" }, { audience: AUD });
      // Read, but neither write nor admin: refused on the registry's writes and the dump alone.
      const reader = await idp.sign({ sub: "dave", scope: "openid read" }, { audience: AUD });
      for (const c of CASES) {
        const { line, answered: got } = await oneLine(() => answered(srv, surface, c, jwt, fixture));
        expect(got, c.method).toBe(false);
        expect(line, c.method).toMatchObject({ actor: "oidc:carol", outcome: "permission_denied", count: 0 });
        const { line: second, answered: got2 } = await oneLine(() => answered(srv, surface, c, reader, fixture));
        // Answered or not (it holds no grant, so sees no datasource: reads by identifier are not_found), ok only when answered.
        expect(second.outcome === "ok", c.method).toBe(got2);
        expect(second.actor, c.method).toBe("oidc:dave");
        if (c.scope !== "read") expect(second, c.method).toMatchObject({ outcome: "permission_denied", count: 0 });
      }
    });

    it(`a token that does not authenticate is refused, with actor null, over ${surface}`, async () => {
      const forged = await idp.sign({ sub: "mallory", scope: "openid read write admin" }, { audience: AUD, foreignKey: true });
      for (const c of CASES) {
        for (const token of ["tok-nobody", forged]) {
          const { line, answered: got } = await oneLine(() => answered(srv, surface, c, token, fixture));
          expect(got, c.method).toBe(false);
          expect(line, c.method).toMatchObject({ actor: null, outcome: "unauthenticated", count: 0 });
          expect(line.method.endsWith(`.${c.method}`), `${c.method}: ${line.method}`).toBe(true);
        }
      }
    });
  }

  it("wrote one line per call and no payload value, external uid, object path or cursor in any", () => {
    expect(calls).toBeGreaterThan(300);
    expect(written).toHaveLength(calls);
    const text = written.join("");
    for (const marker of [ACC, SECRET, UID, PATH_MARK, fixture.path, fixture.cursor, "s3://"]) expect(text, marker).not.toContain(marker);
  });
});
