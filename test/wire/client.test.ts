// The TypeScript client against a live server over each transport, its
// default as_of (docs/contract/13-client.md), and the gRPC health and reflection
// services a generic gRPC tool relies on.
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  Health,
  HealthCheckRequestSchema,
  HealthCheckResponseSchema,
  HealthCheckResponse_ServingStatus as Status,
} from "../../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { createResourceStoreClient, createResourceStoreClientV1, type TransportKind } from "../../src/client/index.js";
import { startTestServer, type TestServer } from "../support/app.js";

let srv: TestServer;
beforeAll(async () => {
  srv = await startTestServer();
});
afterAll(async () => {
  await srv?.close();
});

describe.each<TransportKind>(["connect", "grpc", "grpc-web"])("client over %s", (transport) => {
  it("injects its default as_of into reads that set none, and not into writes or cursor pages", async () => {
    const live = createResourceStoreClient({ baseUrl: srv.url, transport });
    const id = `cl-${transport}`;
    await live.resources.create({
      resources: [{ identifier: id, payload: { case: "study", value: { modality: "CT" } } }],
    });
    const [created] = (await live.resources.read({ identifiers: [id] })).resources;
    const t0 = created!.createdAt;

    const pinned = createResourceStoreClient({ baseUrl: srv.url, transport, asOf: t0 });
    // A write through the pinned client still happens now.
    await pinned.resources.update({
      updates: { [id]: { payload: { case: "study", value: { modality: "MR" } }, updateMask: { paths: ["modality"] } } },
    });
    const now = (await live.resources.read({ identifiers: [id] })).resources[0]!;
    expect(now.payload.value).toMatchObject({ modality: "MR" });
    // Reads through the pinned client see t0 ...
    const then = (await pinned.resources.read({ identifiers: [id] })).resources[0]!;
    expect(then.payload.value).toMatchObject({ modality: "CT" });
    expect((await pinned.query.count({ payloadType: "study", identifiers: [id], filters: [] })).count).toBe(1n);
    // ... unless the call sets its own.
    const own = (await pinned.resources.read({ identifiers: [id], asOf: now.updatedAt })).resources[0]!;
    expect(own.payload.value).toMatchObject({ modality: "MR" });

    // A cursor carries its own read point: the client leaves its as_of out of
    // later pages (the server would refuse an as_of other than the cursor's).
    const ids = Array.from({ length: 3 }, (_, i) => `${id}-p${i}`);
    await live.resources.create({
      resources: ids.map((identifier) => ({ identifier, payload: { case: "annotation", value: { label: "x" } } })),
    });
    const t1 = (await live.resources.read({ identifiers: [ids[2]!] })).resources[0]!.createdAt;
    let cursor: string | undefined;
    const seen: string[] = [];
    do {
      const page = await pinned.query.query({
        identifiers: ids,
        limit: 2,
        sortBy: "identifier",
        sortOrder: "asc",
        ...(cursor ? { cursor } : { asOf: t1 }),
      });
      seen.push(...page.results.map((r) => r.identifier));
      cursor = page.nextCursor;
    } while (cursor);
    expect(seen).toEqual(ids);
  });

  it("asks for compressed answers only with `compression: true`", async () => {
    const id = `cz-${transport}`;
    const live = createResourceStoreClient({ baseUrl: srv.url, transport });
    await live.resources.create({
      resources: [{ identifier: id, payload: { case: "study", value: { description: "x".repeat(4000) } } }],
    });
    const encodingOf = async (compression: boolean | undefined): Promise<string | null> => {
      let encoding: string | null = null;
      const c = createResourceStoreClient({
        baseUrl: srv.url,
        transport,
        ...(compression !== undefined ? { compression } : {}),
        interceptors: [
          (next) => async (req) => {
            const res = await next(req);
            encoding = res.header.get(transport === "connect" ? "content-encoding" : "grpc-encoding");
            return res;
          },
        ],
      });
      expect((await c.resources.read({ identifiers: [id] })).resources[0]!.payload.value).toMatchObject({
        description: "x".repeat(4000),
      });
      return encoding;
    };
    expect(await encodingOf(undefined)).toBeNull();
    expect(await encodingOf(false)).toBeNull();
    expect(await encodingOf(true)).toMatch(/^(gzip|br)$/);
  });

  it("lets its interceptors see the request as built, and writes it as built (requests encoded by plan on gRPC and gRPC-Web)", async () => {
    const seen: unknown[] = [];
    const c = createResourceStoreClient({
      baseUrl: srv.url,
      transport,
      interceptors: [
        (next) => (req) => {
          if (!req.stream) seen.push(req.message);
          return next(req);
        },
      ],
    });
    const p = `pl-${transport}`;
    const resources = [
      {
        identifier: `${p}-s`,
        license: "CC-BY-4.0",
        payload: { case: "study" as const, value: { modality: "CT", description: "é ☃ 𝄞" } },
      },
      {
        identifier: `${p}-a`,
        parentIdentifier: `${p}-s`,
        derivedFrom: [`${p}-s`],
        payload: { case: "annotation" as const, value: { label: "x" } },
      },
    ];
    expect((await c.resources.create({ resources })).created).toBe(2n);
    expect((seen[0] as { resources: unknown[] }).resources).toHaveLength(2);
    const back = (await c.resources.read({ identifiers: resources.map((r) => r.identifier) })).resources;
    expect(
      back.map((r) => [r.identifier, r.parentIdentifier ?? null, r.license ?? null, r.derivedFrom, r.payload.value]),
    ).toEqual([
      [`${p}-s`, null, "CC-BY-4.0", [], expect.objectContaining({ modality: "CT", description: "é ☃ 𝄞" })],
      [`${p}-a`, `${p}-s`, null, [`${p}-s`], expect.objectContaining({ label: "x" })],
    ]);
  });

  it("reaches first-revision services too", async () => {
    const v1 = createResourceStoreClientV1({ baseUrl: srv.url, transport });
    const roots = await v1.lineage.children({});
    expect(roots.nodes.length).toBeGreaterThan(0);
  });
});

describe("grpc.health.v1 and reflection", () => {
  it("answers SERVING to grpc-js for the server and for a service, NOT_FOUND for an unknown one", async () => {
    const client = new grpc.Client(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure());
    const check = (service: string) =>
      new Promise<{ status?: number; code?: number }>((resolve) =>
        client.makeUnaryRequest(
          "/grpc.health.v1.Health/Check",
          (m: ReturnType<typeof create<typeof HealthCheckRequestSchema>>) =>
            Buffer.from(toBinary(HealthCheckRequestSchema, m)),
          (b: Buffer) => fromBinary(HealthCheckResponseSchema, b),
          create(HealthCheckRequestSchema, { service }),
          (err, res) => resolve(err ? { code: err.code } : { status: res!.status }),
        ),
      );
    expect(await check("")).toEqual({ status: Status.SERVING });
    expect(await check("resourcestore.v2.ResourceService")).toEqual({ status: Status.SERVING });
    expect(await check("nope.Service")).toEqual({ code: grpc.status.NOT_FOUND });
    client.close();
  });

  it("lists the services and serves the descriptor of a symbol with its imports", async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: srv.url }));
    expect((await health.check({ service: "" })).status).toBe(Status.SERVING);
    const reflection = createClient(ServerReflection, createGrpcTransport({ baseUrl: srv.url }));
    const requests = createAsyncIterable([
      { host: "", messageRequest: { case: "listServices" as const, value: "" } },
      { host: "", messageRequest: { case: "fileContainingSymbol" as const, value: "resourcestore.v2.QueryService" } },
      { host: "", messageRequest: { case: "fileContainingSymbol" as const, value: "no.such.Symbol" } },
    ]);
    const answers = [];
    for await (const res of reflection.serverReflectionInfo(requests)) answers.push(res.messageResponse);
    expect(answers[0]!.case).toBe("listServicesResponse");
    const names = (answers[0]!.value as { service: { name: string }[] }).service.map((s) => s.name);
    expect(names).toEqual(
      expect.arrayContaining([
        "resourcestore.v1.AdminService",
        "resourcestore.v2.ResourceService",
        "grpc.health.v1.Health",
      ]),
    );
    expect(answers[1]!.case).toBe("fileDescriptorResponse");
    const files = (answers[1]!.value as { fileDescriptorProto: Uint8Array[] }).fileDescriptorProto;
    // The service's file plus what it imports (query.proto, annotations, ...).
    expect(files.length).toBeGreaterThan(2);
    expect(Buffer.from(files[0]!).toString("latin1")).toContain("resourcestore/v2/query_service.proto");
    expect(answers[2]!.case).toBe("errorResponse");
  });
});
