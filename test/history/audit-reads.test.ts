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
import type { DescService } from "@bufbuild/protobuf";
import { ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminService } from "../../gen/resourcestore/v1/admin_service_pb.js";
import { ArtefactService } from "../../gen/resourcestore/v1/artefact_service_pb.js";
import { EventService as EventServiceV1 } from "../../gen/resourcestore/v1/event_service_pb.js";
import { LineageService as LineageServiceV1 } from "../../gen/resourcestore/v1/lineage_service_pb.js";
import { QueryService as QueryServiceV1 } from "../../gen/resourcestore/v1/query_service_pb.js";
import { RegistryService as RegistryServiceV1 } from "../../gen/resourcestore/v1/registry_service_pb.js";
import { ResourceService as ResourceServiceV1 } from "../../gen/resourcestore/v1/resource_service_pb.js";
import { StatsService as StatsServiceV1 } from "../../gen/resourcestore/v1/stats_service_pb.js";
import { StorageService as StorageServiceV1 } from "../../gen/resourcestore/v1/storage_service_pb.js";
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
const ACC_QUERY = {
  payload_type: "study",
  limit: 1,
  filters: [{ field: "accession_number", op: "starts_with", value: ACC }],
};

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
  return createConnectTransport({
    baseUrl: srv.url,
    httpVersion: "1.1",
    useBinaryFormat: surface === "connect-binary",
  });
}

/** Values the cases need, known once the fixtures are written. */
interface Fixture {
  path: string;
  cursor: string;
  patient: string;
  seq: number;
}

/** One audited read path: its service (every revision that has it) and method, the RPC request and the REST request (unprefixed). */
interface Case {
  readonly services: readonly DescService[];
  readonly method: string;
  readonly scope: "read" | "write" | "admin";
  readonly request: (f: Fixture) => Record<string, unknown>;
  readonly rest: (f: Fixture) => { verb: "GET" | "POST"; path: string; body?: unknown };
  /** For a stream: a request it refuses before its first message (invalid_argument). */
  readonly refused?: Pick<Case, "request" | "rest">;
}

const q = (path: string) => encodeURIComponent(path);
const fresh = (f: Fixture) => `${UID}-${++f.seq}`;
const accFilter = {
  field: "accession_number",
  op: "starts_with",
  value: { kind: { case: "stringValue", value: ACC } },
};
const dirOf = (path: string) => path.slice(0, path.lastIndexOf("/") + 1);

const RESOURCE = [ResourceService, ResourceServiceV1];
const QUERY = [QueryService, QueryServiceV1];
const REGISTRY = [RegistryService, RegistryServiceV1];
const STATS = [StatsService, StatsServiceV1];
const STORAGE = [StorageService, StorageServiceV1];

const CASES: readonly Case[] = [
  {
    services: RESOURCE,
    method: "Read",
    scope: "read",
    request: () => ({ identifiers: ["st-1"] }),
    rest: () => ({ verb: "POST", path: "/resources/read", body: { identifiers: ["st-1"] } }),
  },
  {
    services: RESOURCE,
    method: "History",
    scope: "read",
    request: () => ({ identifier: "st-1" }),
    rest: () => ({ verb: "POST", path: "/resources/history", body: { identifier: "st-1" } }),
  },
  // A filter's value and a cursor: neither may reach a line.
  {
    services: QUERY,
    method: "Query",
    scope: "read",
    request: (f) => ({ payloadType: "study", limit: 1, cursor: f.cursor, filters: [accFilter] }),
    rest: (f) => ({ verb: "POST", path: "/query", body: { ...ACC_QUERY, cursor: f.cursor } }),
  },
  {
    services: QUERY,
    method: "Count",
    scope: "read",
    request: () => ({
      payloadType: "study",
      filters: [{ field: "description", op: "contains", value: { kind: { case: "stringValue", value: SECRET } } }],
    }),
    rest: () => ({
      verb: "POST",
      path: "/query/count",
      body: { payload_type: "study", filters: [{ field: "description", op: "contains", value: SECRET }] },
    }),
  },
  {
    services: QUERY,
    method: "QueryParquet",
    scope: "read",
    request: (f) => ({ payloadType: "study", limit: 1, cursor: f.cursor, filters: [accFilter] }),
    rest: (f) => ({ verb: "POST", path: "/query/parquet", body: { ...ACC_QUERY, cursor: f.cursor } }),
    refused: {
      request: () => ({ payloadType: "study", filters: [{ field: "no_such_field", op: "eq" }] }),
      rest: () => ({
        verb: "POST",
        path: "/query/parquet",
        body: { payload_type: "study", filters: [{ field: "no_such_field", op: "eq", value: 1 }] },
      }),
    },
  },
  {
    services: [LineageServiceV1],
    method: "Children",
    scope: "read",
    request: () => ({ parentIdentifier: "pa-a" }),
    rest: () => ({ verb: "GET", path: "/children?parent_identifier=pa-a" }),
  },
  {
    services: [LineageService, LineageServiceV1],
    method: "Parents",
    scope: "read",
    request: () => ({ identifier: "st-1" }),
    rest: () => ({ verb: "GET", path: "/parents/st-1" }),
  },
  {
    services: [ArtefactService],
    method: "Latest",
    scope: "read",
    request: () => ({ repo: "r", branch: "main", path: "m.onnx" }),
    rest: () => ({ verb: "GET", path: "/artefacts/latest?repo=r&branch=main&path=m.onnx" }),
  },
  {
    services: STATS,
    method: "Stats",
    scope: "read",
    request: () => ({}),
    rest: () => ({ verb: "GET", path: "/datasources/stats" }),
  },
  {
    services: STATS,
    method: "DetailedStats",
    scope: "read",
    request: () => ({ datasourceId: "ds-a" }),
    rest: () => ({ verb: "GET", path: "/datasources/detailed-stats?datasource_id=ds-a" }),
  },
  // Both feeds (REST: GET /events, Server-Sent Events), from a since that has events to replay.
  {
    services: [EventService, EventServiceV1],
    method: "Watch",
    scope: "read",
    request: () => ({ since: SINCE }),
    rest: () => ({ verb: "GET", path: `/events?since=${q(SINCE)}` }),
    refused: {
      request: () => ({ since: "yesterday" }),
      rest: () => ({ verb: "GET", path: "/events?since=yesterday" }),
    },
  },
  // The online backup (admin).
  {
    services: [AdminService],
    method: "Dump",
    scope: "admin",
    request: () => ({}),
    rest: () => ({ verb: "GET", path: "/admin/dump" }),
    refused: {
      request: () => ({ since: "yesterday" }),
      rest: () => ({ verb: "GET", path: "/admin/dump?since=yesterday" }),
    },
  },
  {
    services: REGISTRY,
    method: "RegisterPatient",
    scope: "write",
    request: (f) => ({ datasourceId: "ds-a", externalUid: fresh(f) }),
    rest: (f) => ({
      verb: "POST",
      path: "/patients/register",
      body: { datasource_id: "ds-a", external_uid: fresh(f) },
    }),
  },
  {
    services: REGISTRY,
    method: "ResolvePatient",
    scope: "read",
    request: () => ({ datasourceId: "ds-a", externalUid: UID }),
    rest: () => ({ verb: "POST", path: "/patients/resolve", body: { datasource_id: "ds-a", external_uid: UID } }),
  },
  {
    services: REGISTRY,
    method: "RegisterStudy",
    scope: "write",
    request: (f) => ({ patientIdentifier: f.patient, externalUid: fresh(f) }),
    rest: (f) => ({
      verb: "POST",
      path: "/studies/register",
      body: { patient_identifier: f.patient, external_uid: fresh(f) },
    }),
  },
  {
    services: REGISTRY,
    method: "ResolveStudy",
    scope: "read",
    request: (f) => ({ patientIdentifier: f.patient, externalUid: `${UID}-s` }),
    rest: (f) => ({
      verb: "POST",
      path: "/studies/resolve",
      body: { patient_identifier: f.patient, external_uid: `${UID}-s` },
    }),
  },
  {
    services: STORAGE,
    method: "Presign",
    scope: "read",
    request: (f) => ({ direction: "download", path: f.path }),
    rest: (f) => ({ verb: "POST", path: "/s3/presign", body: { direction: "download", path: f.path } }),
  },
  {
    services: STORAGE,
    method: "PresignBatch",
    scope: "read",
    request: (f) => ({ direction: "download", items: [{ path: f.path }] }),
    rest: (f) => ({
      verb: "POST",
      path: "/s3/presign/batch",
      body: { direction: "download", items: [{ path: f.path }] },
    }),
  },
  {
    services: STORAGE,
    method: "ParquetPreview",
    scope: "read",
    request: (f) => ({ path: f.path, limit: 3 }),
    rest: (f) => ({ verb: "GET", path: `/s3/parquet?path=${q(f.path)}&limit=3` }),
  },
  {
    services: [StorageService],
    method: "List",
    scope: "read",
    request: (f) => ({ prefix: dirOf(f.path) }),
    rest: (f) => ({ verb: "GET", path: `/s3/list?prefix=${q(dirOf(f.path))}` }),
  },
];

/** A case in one revision: the service, and the prefix of its REST paths. */
interface Target {
  readonly c: Case;
  readonly service: DescService;
  /** The RPC method's full name, as its audit line names it. */
  readonly name: string;
  readonly prefix: string;
}

/** Every case in every revision that has it. */
const TARGETS: readonly Target[] = CASES.flatMap((c) =>
  c.services.map((service) => ({
    c,
    service,
    name: `${service.typeName}/${c.method}`,
    prefix: `/${service.typeName.split(".")[1] ?? ""}`,
  })),
);

/**
 * Makes the call and answers whether the caller got an answer: a unary
 * answer, a stream's first message (a stream is left after it: the feeds do
 * not end), a REST 200 with its first bytes.
 */
async function answered(
  srv: TestServer,
  surface: Surface,
  target: Target,
  token: string,
  f: Fixture,
): Promise<boolean> {
  if (surface === "rest") {
    const r = target.c.rest(f);
    const abort = new AbortController();
    const res = await fetch(srv.url + target.prefix + r.path, {
      method: r.verb,
      signal: abort.signal,
      headers: {
        authorization: `Bearer ${token}`,
        ...(r.body !== undefined ? { "content-type": "application/json" } : {}),
      },
      ...(r.body !== undefined ? { body: JSON.stringify(r.body) } : {}),
    });
    const reader = res.body?.getReader();
    const first = await reader?.read();
    abort.abort();
    await reader?.cancel().catch(() => undefined);
    return res.status === 200 && first !== undefined && first.done !== true;
  }
  const method = target.service.methods.find((m) => m.name === target.c.method);
  if (method === undefined) throw new Error(`${target.name}: no such method`);
  const client = createClient(target.service, transportOf(srv, surface)) as unknown as Record<
    string,
    (req: unknown, opts: unknown) => Promise<unknown> | AsyncIterable<unknown>
  >;
  const h = { headers: { authorization: `Bearer ${token}` } };
  try {
    const out = client[method.localName]!(target.c.request(f), h);
    if (method.methodKind === "server_streaming") {
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
    const res = await fetch(srv.url + path, {
      method: "POST",
      headers: { authorization: "Bearer tok-admin", "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    expect(res.status, text).toBe(200);
    return JSON.parse(text) as Record<string, unknown>;
  };
  const up = (await call("/s3/presign", { direction: "upload", group: "audit", filename: `${PATH_MARK}.parquet` })) as {
    url: string;
    path: string;
  };
  expect((await fetch(up.url, { method: "PUT", body: writeFixture(12, 4).bytes })).status).toBe(200);
  fixture.path = up.path;
  await call("/resources/create", {
    resources: [
      { identifier: "ds-a", payload_type: "datasource", name: "A" },
      { identifier: "pa-a", payload_type: "patient", parent_identifier: "ds-a", datasource_id: "ds-a" },
      {
        identifier: "st-1",
        payload_type: "study",
        parent_identifier: "pa-a",
        accession_number: ACC,
        description: SECRET,
      },
      { identifier: "st-2", payload_type: "study", parent_identifier: "pa-a", accession_number: `${ACC}-2` },
      { identifier: "st-3", payload_type: "study", parent_identifier: "pa-a" },
      { identifier: "fi-1", payload_type: "dataset", parent_identifier: "st-1", name: "d", path: fixture.path },
      {
        identifier: "ar-1",
        payload_type: "artefact",
        parent_identifier: "ds-a",
        repo: "r",
        branch: "main",
        path: "m.onnx",
        status: "succeeded",
      },
    ],
  });
  fixture.patient = String(
    (await call("/patients/register", { datasource_id: "ds-a", external_uid: UID }))["identifier"],
  );
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
  it("the cases cover every audited method of every revision", () => {
    for (const t of TARGETS) expect(isAudited(t.service.name, t.c.method), t.name).toBe(true);
    const all = [
      AdminService,
      ArtefactService,
      EventService,
      EventServiceV1,
      LineageService,
      LineageServiceV1,
      QueryService,
      QueryServiceV1,
      RegistryService,
      RegistryServiceV1,
    ];
    const covered = new Set(TARGETS.map((t) => t.name));
    for (const svc of [
      ...all,
      ResourceService,
      ResourceServiceV1,
      StatsService,
      StatsServiceV1,
      StorageService,
      StorageServiceV1,
    ])
      for (const m of svc.methods)
        if (isAudited(svc.name, m.name))
          expect(covered, `${svc.typeName}/${m.name}`).toContain(`${svc.typeName}/${m.name}`);
  });

  for (const surface of SURFACES) {
    it(`a caller holding the scope is answered, with its actor and ok, over ${surface}`, async () => {
      for (const t of TARGETS) {
        const { line, answered: got } = await oneLine(() => answered(srv, surface, t, "tok-admin", fixture));
        expect(got, t.name).toBe(true);
        expect(line, t.name).toMatchObject({ method: t.name, actor: "keeper", outcome: "ok" });
      }
    });

    it(`a stream refused before its first message is audited with its refusal, never ok, over ${surface}`, async () => {
      for (const t of TARGETS.filter((x) => x.c.refused !== undefined)) {
        const bad: Target = { ...t, c: { ...t.c, request: t.c.refused!.request, rest: t.c.refused!.rest } };
        const { line, answered: got } = await oneLine(() => answered(srv, surface, bad, "tok-admin", fixture));
        expect(got, t.name).toBe(false);
        expect(line, t.name).toMatchObject({ method: t.name, actor: "keeper", outcome: "invalid_argument", count: 0 });
      }
    });

    it(`a static token without the method's scope is refused, with its actor, over ${surface}`, async () => {
      for (const t of TARGETS.filter((x) => x.c.scope !== "read")) {
        const { line, answered: got } = await oneLine(() => answered(srv, surface, t, "tok-r", fixture));
        expect(got, t.name).toBe(false);
        expect(line, t.name).toMatchObject({ method: t.name, actor: "reader", outcome: "permission_denied", count: 0 });
      }
    });

    it(`a JWT without the read scope is refused, with its oidc: actor, over ${surface}`, async () => {
      const jwt = await idp.sign({ sub: "carol", scope: "openid" }, { audience: AUD });
      // Read, but neither write nor admin, and no grant: refused on the registry's writes and the dump.
      const reader = await idp.sign({ sub: "dave", scope: "openid read" }, { audience: AUD });
      for (const t of TARGETS) {
        const { line, answered: got } = await oneLine(() => answered(srv, surface, t, jwt, fixture));
        expect(got, t.name).toBe(false);
        expect(line, t.name).toMatchObject({
          method: t.name,
          actor: "oidc:carol",
          outcome: "permission_denied",
          count: 0,
        });
        const { line: second, answered: got2 } = await oneLine(() => answered(srv, surface, t, reader, fixture));
        // It sees no datasource, so some reads are not_found: answered or not, ok only when answered.
        expect(second.outcome === "ok", t.name).toBe(got2);
        expect(second.actor, t.name).toBe("oidc:dave");
        if (t.c.scope !== "read") expect(second, t.name).toMatchObject({ outcome: "permission_denied", count: 0 });
      }
    });

    it(`a token that does not authenticate is refused, with actor null, over ${surface}`, async () => {
      const forged = await idp.sign(
        { sub: "mallory", scope: "openid read write admin" },
        { audience: AUD, foreignKey: true },
      );
      for (const t of TARGETS) {
        for (const token of ["tok-nobody", forged]) {
          const { line, answered: got } = await oneLine(() => answered(srv, surface, t, token, fixture));
          expect(got, t.name).toBe(false);
          expect(line, t.name).toMatchObject({ method: t.name, actor: null, outcome: "unauthenticated", count: 0 });
        }
      }
    });
  }

  it("wrote one line per call and no payload value, external uid, object path or cursor in any", () => {
    expect(calls).toBeGreaterThan(600);
    expect(written).toHaveLength(calls);
    const text = written.join("");
    for (const marker of [ACC, SECRET, UID, PATH_MARK, fixture.path, fixture.cursor, "s3://"])
      expect(text, marker).not.toContain(marker);
  });
});
