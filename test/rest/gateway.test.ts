// The gateway end to end: real service descriptors of both revisions, fake
// handlers on a router transport that echo the request message they got
// (as proto3 JSON in a response header), an HTTP server on port 0, fetch.
import { createServer } from "node:http";
import type { IncomingMessage, Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { create, toJsonString } from "@bufbuild/protobuf";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { ConnectError, createRouterTransport } from "@connectrpc/connect";
import type { HandlerContext } from "@connectrpc/connect";
import { codeFromString } from "@connectrpc/connect/protocol-connect";
import { ACCEPT_COMPRESSION } from "../../src/rpc/index.js";
import { createRestHandler, restStatus } from "../../src/rest/index.js";
import { arrive } from "../../src/http/arrival.js";
import type { Revision } from "../../src/rest/index.js";
import { HttpBodySchema } from "../../gen/google/api/httpbody_pb.js";
import type { CreateRequest, ReadRequest, UpdateRequest } from "../../gen/resourcestore/type/v1/resource_pb.js";
import type { QueryRequest } from "../../gen/resourcestore/type/v1/query_pb.js";
import type { ParentsRequest } from "../../gen/resourcestore/type/v1/lineage_pb.js";
import * as v1Admin from "../../gen/resourcestore/v1/admin_service_pb.js";
import * as v1Artefact from "../../gen/resourcestore/v1/artefact_service_pb.js";
import * as v1Lineage from "../../gen/resourcestore/v1/lineage_service_pb.js";
import * as v1Query from "../../gen/resourcestore/v1/query_service_pb.js";
import * as v1Registry from "../../gen/resourcestore/v1/registry_service_pb.js";
import * as v1Resource from "../../gen/resourcestore/v1/resource_service_pb.js";
import * as v1Schema from "../../gen/resourcestore/v1/schema_service_pb.js";
import * as v1Stats from "../../gen/resourcestore/v1/stats_service_pb.js";
import * as v1Storage from "../../gen/resourcestore/v1/storage_service_pb.js";
import * as v2Lineage from "../../gen/resourcestore/v2/lineage_service_pb.js";
import * as v2Query from "../../gen/resourcestore/v2/query_service_pb.js";
import * as v2Registry from "../../gen/resourcestore/v2/registry_service_pb.js";
import * as v2Resource from "../../gen/resourcestore/v2/resource_service_pb.js";
import * as v2Schema from "../../gen/resourcestore/v2/schema_service_pb.js";
import * as v2Stats from "../../gen/resourcestore/v2/stats_service_pb.js";
import * as v2Storage from "../../gen/resourcestore/v2/storage_service_pb.js";

function servicesOf(...modules: object[]): DescService[] {
  return modules.flatMap((m) =>
    Object.values(m).filter((v): v is DescService => (v as { kind?: string }).kind === "service"),
  );
}

const revisions: Revision[] = [
  {
    name: "v1",
    services: servicesOf(v1Admin, v1Artefact, v1Lineage, v1Query, v1Registry, v1Resource, v1Schema, v1Stats, v1Storage),
  },
  { name: "v2", services: servicesOf(v2Lineage, v2Query, v2Registry, v2Resource, v2Schema, v2Stats, v2Storage) },
];

const MAX_BODY = 2048;
const calls: string[] = [];
const aborted: string[] = [];

/** Canned answers where the shape of the response matters; everything else answers an empty message. */
const answers: Record<string, (req: never, ctx: HandlerContext) => unknown> = {
  Create: (req: CreateRequest) => ({ created: BigInt(req.resources.length) }),
  Update: (req: UpdateRequest) => ({ updated: BigInt(Object.keys(req.updates).length) }),
  Read: (req: ReadRequest) => ({
    resources: req.identifiers.map((id) => ({
      identifier: id,
      version: 2n,
      children: ["kid-1"],
      createdAt: "2026-11-21T23:05:01.123456Z",
      payload: { case: "file", value: { path: "s3://b/k", sizeBytes: 9007199254740993n } },
    })),
  }),
  Query: (req: QueryRequest) => ({
    results: [
      { identifier: "s1", license: "MIT", payload: { case: "study", value: { modality: "CT", description: "head" } } },
      { identifier: "s2", payload: { case: "study", value: { modality: "MR" } } },
    ],
    ...(req.limit !== undefined ? { limit: req.limit, nextCursor: "opaque" } : {}),
  }),
  Count: () => ({ count: 42n }),
  Parents: (req: ParentsRequest) => {
    if (req.identifier === "crash") throw new Error("SELECT secret FROM vault at /srv/app/store.ts:12");
    if (req.identifier === "internal")
      throw new ConnectError("pq: relation secrets does not exist", codeFromString("internal"));
    const code = codeFromString(req.identifier);
    if (code !== undefined) throw new ConnectError(`handler says ${req.identifier}`, code);
    return { identifiers: ["p1", "p0"] };
  },
  Children: () => ({
    nodes: [{ identifier: "c1", payloadType: "study", createdAt: "t", childCount: 3n, descendantCount: 7n }],
  }),
  Latest: () => ({
    resource: {
      identifier: "a1",
      payload: { case: "artefact", value: { repo: "r", status: "succeeded", metrics: { auc: 0.9 } } },
    },
  }),
  DetailedStats: () => ({
    datasources: [
      {
        datasourceId: "ds",
        patients: 2n,
        studies: 3n,
        resources: 5n,
        byPayloadType: { study: 3n },
        byAccessLevel: {},
        totalBytes: "123",
      },
    ],
  }),
  Schemas: () => ({ schemas: { study: { type: "object", additionalProperties: false } } }),
  ParquetPreview: () => ({ columns: ["a"], totalRows: 10n, returnedRows: 1n, offset: 0n, data: [{ a: 1, b: "x" }] }),
  Config: () => ({ s3Endpoint: "http://s3", s3Bucket: "bucket" }),
};

async function* parquetStream(req: QueryRequest, ctx: HandlerContext) {
  if (req.payloadType === "fail-early")
    throw new ConnectError("no such payload type", codeFromString("invalid_argument"));
  yield create(HttpBodySchema, { contentType: "application/vnd.apache.parquet" });
  yield create(HttpBodySchema, { data: new TextEncoder().encode("PAR1") });
  if (req.payloadType === "fail-late") throw new Error("encoder died");
  if (req.payloadType === "fail-after-flush") {
    yield create(HttpBodySchema, { data: new Uint8Array(256 * 1024).fill(7) });
    await new Promise((resolve) => setTimeout(resolve, 50));
    throw new Error("encoder died");
  }
  if (req.payloadType === "hang") {
    await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
    aborted.push("QueryParquet");
    return;
  }
  yield create(HttpBodySchema, { data: new TextEncoder().encode("-body-PAR1") });
}

function echo(method: DescMethod, req: unknown, ctx: HandlerContext): void {
  calls.push(`${method.parent.typeName}.${method.name}`);
  ctx.responseHeader.set("x-echo-method", `${method.parent.typeName}.${method.name}`);
  ctx.responseHeader.set(
    "x-echo",
    encodeURIComponent(toJsonString(method.input, req as never, { useProtoFieldName: true })),
  );
  ctx.responseHeader.set("x-echo-auth", ctx.requestHeader.get("authorization") ?? "");
  ctx.responseHeader.set("x-echo-request-id", ctx.requestHeader.get("x-request-id") ?? "");
  ctx.responseHeader.set("x-echo-cookie", ctx.requestHeader.get("cookie") ?? "");
}

const transport = createRouterTransport((router) => {
  for (const rev of revisions) {
    for (const service of rev.services) {
      const impl: Record<string, unknown> = {};
      for (const method of service.methods) {
        impl[method.localName] =
          method.methodKind === "server_streaming"
            ? (req: QueryRequest, ctx: HandlerContext) => {
                echo(method, req, ctx);
                return parquetStream(req, ctx);
              }
            : (req: never, ctx: HandlerContext) => {
                echo(method, req, ctx);
                return answers[method.name]?.(req, ctx) ?? {};
              };
      }
      router.service(service, impl as never);
    }
  }
});

let server: Server;
let base: string;

beforeAll(async () => {
  const handler = createRestHandler({
    revisions,
    transport,
    maxBodyBytes: MAX_BODY,
    acceptCompression: ACCEPT_COMPRESSION,
  });
  server = createServer((req, res) => {
    void handler(req, res).then((handled) => {
      if (!handled) {
        res.writeHead(404, { "content-type": "text/plain" });
        res.end("not rest");
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(base + path, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

function echoed(res: Response): Record<string, unknown> {
  return JSON.parse(decodeURIComponent(res.headers.get("x-echo") ?? "")) as Record<string, unknown>;
}

async function expectError(res: Response, status: number, code: string, mention?: string): Promise<string> {
  expect(res.status).toBe(status);
  expect(res.headers.get("content-type")).toBe("application/json");
  const body = (await res.json()) as { code: string; message: string; reason: string };
  // The contract's {code, message}, and the catalogue's reason beside them.
  expect(Object.keys(body).sort()).toEqual(["code", "message", "reason"]);
  expect(body.reason).toMatch(/^[A-Z][A-Z0-9_]*$/);
  expect(body.code).toBe(code);
  if (mention !== undefined) expect(body.message).toContain(mention);
  return body.message;
}

describe("revision strictness", () => {
  const only: { rev: "v1" | "v2"; method: string; path: string; body?: unknown; rpc: string }[] = [
    {
      rev: "v2",
      method: "POST",
      path: "/resources/restore",
      body: { identifiers: ["a"] },
      rpc: "ResourceService.Restore",
    },
    { rev: "v1", method: "GET", path: "/children?parent_identifier=p", rpc: "LineageService.Children" },
    {
      rev: "v1",
      method: "GET",
      path: "/artefacts/latest?repo=r&branch=main&path=m.onnx",
      rpc: "ArtefactService.Latest",
    },
    {
      rev: "v1",
      method: "POST",
      path: "/admin/materialized-views/refresh",
      rpc: "AdminService.RefreshMaterializedViews",
    },
    {
      rev: "v2",
      method: "POST",
      path: "/s3/presign/upload-dir",
      body: { group: "g", relpaths: ["a.txt"] },
      rpc: "StorageService.PresignUploadDir",
    },
    { rev: "v2", method: "GET", path: "/s3/list?prefix=s3://bucket/k", rpc: "StorageService.List" },
  ];

  const send = (method: string, path: string, body: unknown) =>
    fetch(base + path, {
      method,
      ...(body !== undefined ? { body: JSON.stringify(body), headers: { "content-type": "application/json" } } : {}),
    });

  it.each(only)("$method $path exists only in $rev", async ({ rev, method, path, body, rpc }) => {
    const other = rev === "v1" ? "v2" : "v1";
    await expectError(await send(method, `/${other}${path}`, body), 404, "not_found");
    for (const prefix of [`/${rev}`, ""]) {
      const res = await send(method, prefix + path, body);
      expect(res.status, prefix + path).toBe(200);
      expect(res.headers.get("x-echo-method")).toBe(`resourcestore.${rev}.${rpc}`);
    }
  });

  it("serves an operation of both revisions unprefixed from the last one", async () => {
    expect((await post("/resources/delete", { identifiers: [] })).headers.get("x-echo-method")).toBe(
      "resourcestore.v2.ResourceService.Delete",
    );
    expect((await post("/v1/resources/delete", { identifiers: [] })).headers.get("x-echo-method")).toBe(
      "resourcestore.v1.ResourceService.Delete",
    );
    expect((await post("/v2/resources/delete", { identifiers: [] })).headers.get("x-echo-method")).toBe(
      "resourcestore.v2.ResourceService.Delete",
    );
  });

  it("leaves unknown unprefixed paths to the next handler, answers unknown revision paths itself", async () => {
    const res = await fetch(`${base}/healthz`);
    expect(await res.text()).toBe("not rest");
    await expectError(await fetch(`${base}/v2/nowhere`), 404, "not_found");
  });

  it("answers 405 with Allow for a known path and the wrong method", async () => {
    const res = await fetch(`${base}/resources/create`);
    expect(res.headers.get("allow")).toBe("POST");
    await expectError(res, 405, "unimplemented", "GET");
    const del = await fetch(`${base}/v1/schemas`, { method: "DELETE" });
    expect(del.headers.get("allow")).toBe("GET");
    expect(del.status).toBe(405);
  });
});

describe("requests and responses", () => {
  it("creates from flat resources and answers the count as a number", async () => {
    const res = await post("/resources/create", {
      resources: [
        { identifier: "s1", payload_type: "study", modality: "CT", license: null, created_at: "ignored", version: 9 },
        {
          identifier: "f1",
          payload_type: "file",
          path: "s3://b/k",
          size_bytes: "9007199254740993",
          parent_identifier: "s1",
        },
      ],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/json");
    expect(await res.json()).toEqual({ created: 2 });
    expect(echoed(res)).toEqual({
      resources: [
        { identifier: "s1", study: { modality: "CT" } },
        { identifier: "f1", parent_identifier: "s1", file: { path: "s3://b/k", size_bytes: "9007199254740993" } },
      ],
    });
  });

  it("updates with a mask built from the keys of each flat update", async () => {
    const res = await post("/resources/update", {
      updates: { s1: { license: null, modality: "MR", payload_type: "study", is_deleted: false } },
    });
    expect(await res.json()).toEqual({ updated: 1 });
    expect(echoed(res)).toEqual({
      updates: { s1: { is_deleted: false, study: { modality: "MR" }, update_mask: "license,modality" } },
    });
  });

  it("reads as a bare array of flat resources, with children unless excluded", async () => {
    const res = await post("/resources/read", { identifiers: ["f1", "f1"] });
    const body = (await res.json()) as Record<string, unknown>[];
    expect(body).toHaveLength(2);
    expect(body[0]).toEqual({
      identifier: "f1",
      parent_identifier: null,
      license: null,
      derived_from: [],
      created_at: "2026-11-21T23:05:01.123456Z",
      updated_at: "",
      version: 2,
      children: ["kid-1"],
      payload_type: "file",
      path: "s3://b/k",
      size_bytes: "9007199254740993",
    });
    const without = (await (
      await post("/resources/read", { identifiers: ["f1"], exclude_children: true })
    ).json()) as Record<string, unknown>[];
    expect(without[0]).not.toHaveProperty("children");
  });

  it("queries with select_columns, nullable next_cursor and limit, and counts as numbers", async () => {
    const res = await post("/query", {
      payload_type: "study",
      select_columns: ["modality"],
      filters: [{ field: "modality", op: "in", value: ["CT", "MR"] }],
    });
    expect(await res.json()).toEqual({
      results: [
        { identifier: "s1", payload_type: "study", modality: "CT" },
        { identifier: "s2", payload_type: "study", modality: "MR" },
      ],
      next_cursor: null,
      limit: null,
    });
    expect(echoed(res)).toMatchObject({ filters: [{ field: "modality", op: "in", value: ["CT", "MR"] }] });
    const limited = (await (await post("/v1/query", { limit: 1 })).json()) as Record<string, unknown>;
    expect(limited).toMatchObject({ limit: 1, next_cursor: "opaque" });
    expect((limited["results"] as Record<string, unknown>[])[0]).not.toHaveProperty("children");
    expect(await (await post("/query/count", {})).json()).toEqual({ count: 42 });
  });

  it("maps path variables and typed query parameters", async () => {
    const res = await fetch(`${base}/parents/stu%3A1?as_of=2026-01-01T00:00:00Z`);
    expect(await res.json()).toEqual(["p1", "p0"]);
    expect(echoed(res)).toEqual({ identifier: "stu:1", as_of: "2026-01-01T00:00:00Z" });

    const children = await fetch(`${base}/children?with_payloads=true`);
    expect(echoed(children)).toEqual({ with_payloads: true });
    expect(await children.json()).toEqual([
      {
        identifier: "c1",
        payload_type: "study",
        parent_identifier: null,
        created_at: "t",
        child_count: 3,
        descendant_count: 7,
      },
    ]);

    // Statistics at an instant (docs/lineage.md): as_of on both, beside datasource_id.
    const stats = await fetch(`${base}/datasources/stats?as_of=2026-01-01T00:00:00Z`);
    expect(echoed(stats)).toEqual({ as_of: "2026-01-01T00:00:00Z" });
    await stats.body?.cancel();
    const detailed = await fetch(`${base}/v2/datasources/detailed-stats?datasource_id=ds&as_of=2026-01-01T00:00:00Z`);
    expect(echoed(detailed)).toEqual({ datasource_id: "ds", as_of: "2026-01-01T00:00:00Z" });
    await detailed.body?.cancel();

    const preview = await fetch(`${base}/s3/parquet?path=s3://b/x.parquet&limit=5&offset=10`);
    expect(echoed(preview)).toEqual({ path: "s3://b/x.parquet", limit: 5, offset: "10" });
    expect(await preview.json()).toEqual({
      columns: ["a"],
      schema: [],
      total_rows: 10,
      returned_rows: 1,
      offset: 0,
      data: [{ a: 1, b: "x" }],
    });
  });

  it("writes maps, Structs and nullable fields per the contract", async () => {
    expect(await (await fetch(`${base}/datasources/detailed-stats?datasource_id=ds`)).json()).toEqual([
      {
        datasource_id: "ds",
        patients: 2,
        studies: 3,
        resources: 5,
        by_payload_type: { study: 3 },
        by_access_level: {},
        total_bytes: "123",
        last_updated_at: null,
      },
    ]);
    expect(await (await fetch(`${base}/schemas`)).json()).toEqual({
      study: { type: "object", additionalProperties: false },
    });
    expect(await (await fetch(`${base}/s3/config`)).json()).toEqual({ s3_endpoint: "http://s3", s3_bucket: "bucket" });
    expect(await (await fetch(`${base}/artefacts/latest?repo=r&branch=b&path=p`)).json()).toEqual({
      identifier: "a1",
      parent_identifier: null,
      license: null,
      derived_from: [],
      created_at: "",
      updated_at: "",
      version: 0,
      payload_type: "artefact",
      repo: "r",
      status: "succeeded",
      metrics: { auc: 0.9 },
    });
  });

  it("forwards authorization and x- headers to the interceptors, nothing else", async () => {
    const res = await fetch(`${base}/s3/config`, {
      headers: { authorization: "Bearer t0k", "x-request-id": "req-7", cookie: "session=1" },
    });
    expect(res.headers.get("x-echo-auth")).toBe("Bearer t0k");
    expect(res.headers.get("x-echo-request-id")).toBe("req-7");
    expect(res.headers.get("x-echo-cookie")).toBe("");
  });
});

describe("client mistakes", () => {
  it("answers 400 for invalid JSON, a body that is not an object, and wrong value types", async () => {
    await expectError(await post("/resources/read", "{identifiers:"), 400, "invalid_argument", "JSON");
    await expectError(await post("/resources/read", "[1,2]"), 400, "invalid_argument", "object");
    // null is JSON but not an object: refused like an array, not read as an empty body.
    await expectError(await post("/resources/read", "null"), 400, "invalid_argument", "object");
    await expectError(await post("/query/count", "null"), 400, "invalid_argument", "object");
    await expectError(await post("/resources/read", { identifiers: "f1" }), 400, "invalid_argument", "identifiers");
    await expectError(
      await post("/resources/read", { identifiers: [], exclude_children: "yes" }),
      400,
      "invalid_argument",
      "exclude_children",
    );
  });

  it("answers 400 naming unknown keys and unknown query parameters", async () => {
    await expectError(
      await post("/resources/read", { identifiers: [], colour: "red" }),
      400,
      "invalid_argument",
      '"colour"',
    );
    await expectError(
      await post("/resources/create", { resources: [{ identifier: "a", payload_type: "study", size_bytes: 1 }] }),
      400,
      "invalid_argument",
      '"size_bytes"',
    );
    await expectError(
      await post("/resources/create", { resources: [{ identifier: "a" }] }),
      400,
      "invalid_argument",
      "payload_type",
    );
    await expectError(
      await post("/resources/update", { updates: { a: { update_mask: "license" } } }),
      400,
      "invalid_argument",
      "update_mask",
    );
    await expectError(await fetch(`${base}/children?colour=red`), 400, "invalid_argument", '"colour"');
    await expectError(await fetch(`${base}/children?with_payloads=maybe`), 400, "invalid_argument", "with_payloads");
    await expectError(await post("/resources/read?as_of=now", { identifiers: [] }), 400, "invalid_argument", "as_of");
  });

  it("answers 413 for a body over the limit, declared or streamed, and runs nothing", async () => {
    const before = calls.length;
    const big = JSON.stringify({ identifiers: ["x".repeat(MAX_BODY)] });
    await expectError(await post("/resources/read", big), 413, "resource_exhausted");
    const chunks = [
      new TextEncoder().encode('{"identifiers":["'),
      new TextEncoder().encode("y".repeat(MAX_BODY)),
      new TextEncoder().encode('"]}'),
    ];
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = chunks.shift();
        if (next) controller.enqueue(next);
        else controller.close();
      },
    });
    const res = await fetch(`${base}/resources/read`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: stream,
      duplex: "half",
    });
    await expectError(res, 413, "resource_exhausted");
    expect(calls.length).toBe(before);
  });
});

describe("error mapping", () => {
  const visible = Object.entries(restStatus).filter(([code]) => !["internal", "unknown", "data_loss"].includes(code));

  it.each(visible)("%s -> %i with the handler's message", async (code, status) => {
    await expectError(await fetch(`${base}/parents/${code}`), status, code, `handler says ${code}`);
  });

  it("pins the statuses of the contract", () => {
    expect(restStatus).toMatchObject({
      invalid_argument: 400,
      failed_precondition: 400,
      not_found: 404,
      unauthenticated: 401,
      permission_denied: 403,
      resource_exhausted: 413,
      unavailable: 503,
      internal: 500,
      unimplemented: 501,
    });
  });

  it("answers 500 internal without leaking what went wrong", async () => {
    for (const id of ["crash", "internal"]) {
      const message = await expectError(await fetch(`${base}/parents/${id}`), 500, "internal");
      expect(message).not.toMatch(/SELECT|relation|\/srv|\.ts/);
    }
  });
});

describe("streamed HttpBody", () => {
  it("streams the bytes with the content type of the first message", async () => {
    const res = await post("/query/parquet", { payload_type: "study" });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/vnd.apache.parquet");
    expect(await res.text()).toBe("PAR1-body-PAR1");
  });

  it("answers a JSON error when the stream fails before the first byte", async () => {
    await expectError(
      await post("/query/parquet", { payload_type: "fail-early" }),
      400,
      "invalid_argument",
      "no such payload type",
    );
  });

  it("breaks the transfer when the stream fails after bytes were sent", async () => {
    // Depending on timing the headers may or may not have left: either the
    // response or its body fails, never a complete-looking file.
    await expect(
      post("/query/parquet", { payload_type: "fail-late" }).then((res) => res.arrayBuffer()),
    ).rejects.toThrow();
  });

  it("gives the client an error, not a short file, when bytes already arrived", async () => {
    const res = await post("/query/parquet", { payload_type: "fail-after-flush" });
    expect(res.status).toBe(200);
    await expect(res.arrayBuffer()).rejects.toThrow();
  });

  it("cancels the call when the client goes away", async () => {
    const controller = new AbortController();
    const res = await fetch(`${base}/query/parquet`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ payload_type: "hang" }),
      signal: controller.signal,
    });
    const reader = res.body?.getReader();
    expect(new TextDecoder().decode((await reader?.read())?.value)).toBe("PAR1");
    controller.abort();
    await vi.waitFor(() => expect(aborted).toContain("QueryParquet"), { timeout: 5000 });
  });
});

// The route is matched once a request, at the front door (src/http/arrival.ts,
// Resolution): the gateway answers by the resolution on the arrival and
// matches nothing again. Shown by a door that resolves every request as if it
// were another: the gateway then answers that other operation.
describe("the front door's resolution", () => {
  it("is what the gateway answers by: it does not match the request's path again", async () => {
    const handler = createRestHandler({
      revisions,
      transport,
      maxBodyBytes: MAX_BODY,
      acceptCompression: ACCEPT_COMPRESSION,
    });
    let resolutions = 0;
    const door = createServer((req, res) => {
      const arrival = arrive(req);
      if (req.headers["x-resolve-as"] !== undefined) {
        resolutions += 1;
        arrival.resolution = handler.resolve("POST", { url: String(req.headers["x-resolve-as"]) } as IncomingMessage);
      }
      void handler(req, res, arrival);
    });
    await new Promise<void>((resolve) => door.listen(0, "127.0.0.1", resolve));
    const at = `http://127.0.0.1:${(door.address() as AddressInfo).port}`;
    try {
      const send = (extra: Record<string, string>) =>
        fetch(`${at}/query`, {
          method: "POST",
          headers: { "content-type": "application/json", ...extra },
          body: JSON.stringify({}),
        });
      const resolved = await send({ "x-resolve-as": "/v1/resources/read" });
      expect(resolved.status).toBe(200);
      expect(resolved.headers.get("x-echo-method")).toBe("resourcestore.v1.ResourceService.Read");
      expect(resolutions).toBe(1);
      // Without a door's resolution (the gateway served on its own), it matches the path itself.
      const own = await send({});
      expect(own.headers.get("x-echo-method")).toBe("resourcestore.v2.QueryService.Query");
      // And a resolution the gateway did not make (an RPC path's) is not one it can answer by: it matches the path.
      const arrivalOfOther = await new Promise<string | null>((resolve, reject) => {
        const other = createServer((req, res) => {
          const arrival = arrive(req);
          arrival.resolution = { method: undefined, rpcPath: true };
          void handler(req, res, arrival);
        });
        other.listen(0, "127.0.0.1", () => {
          fetch(`http://127.0.0.1:${(other.address() as AddressInfo).port}/query`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: "{}",
          })
            .then((r) => resolve(r.headers.get("x-echo-method")))
            .catch(reject)
            .finally(() => other.close());
        });
      });
      expect(arrivalOfOther).toBe("resourcestore.v2.QueryService.Query");
    } finally {
      door.closeAllConnections();
      await new Promise<void>((resolve) => door.close(() => resolve()));
    }
  });
});
