// The first vertical slice end to end over the three protocols on one port:
// create and read every payload type over REST, Connect JSON and gRPC
// (@grpc/grpc-js over HTTP/2, which also proves the first-bytes sniffing).
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ReadRequestSchema,
  ReadResponseSchema,
  CreateRequestSchema,
  CreateResponseSchema,
} from "../../gen/resourcestore/type/v1/resource_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { payloadTypeNames } from "../../src/schema/payload-registry.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { fullSamples } from "../support/samples.js";

let srv: TestServer;
beforeAll(async () => {
  srv = await startTestServer();
});
afterAll(async () => {
  await srv?.close();
});

async function rest(path: string, body?: unknown, method = "POST"): Promise<{ status: number; json: any }> {
  const res = await fetch(srv.url + path, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text === "" ? undefined : JSON.parse(text) };
}

function grpcUnary<I extends DescMessage, O extends DescMessage>(
  path: string,
  inSchema: I,
  outSchema: O,
  input: MessageShape<I>,
): Promise<MessageShape<O>> {
  const client = new grpc.Client(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure());
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      path,
      (m: MessageShape<I>) => Buffer.from(toBinary(inSchema, m)),
      (b: Buffer) => fromBinary(outSchema, b),
      input,
      (err, out) => {
        client.close();
        if (err) reject(err);
        else resolve(out as MessageShape<O>);
      },
    );
  });
}

describe("create and read every payload type", () => {
  it("has a sample for every payload type", () => {
    expect(Object.keys(fullSamples).sort()).toEqual([...payloadTypeNames].sort());
  });

  it.each(payloadTypeNames)("%s over REST, Connect JSON and gRPC", async (type) => {
    const sample = fullSamples[type]!;
    const id = `rest-${type}`;
    const created = await rest("/resources/create", {
      resources: [{ identifier: id, payload_type: type, license: "CC-BY-4.0", ...sample }],
    });
    expect(created).toEqual({ status: 200, json: { created: 1 } });

    // REST: flat, every metadata field present, every payload field back as sent.
    const read = await rest("/resources/read", { identifiers: [id] });
    expect(read.status).toBe(200);
    expect(read.json).toHaveLength(1);
    const r = read.json[0];
    expect(r).toMatchObject({
      identifier: id,
      payload_type: type,
      parent_identifier: null,
      license: "CC-BY-4.0",
      access_level: "internal",
      derived_from: [],
      version: 1,
      children: [],
      ...sample,
    });
    expect(r.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    expect(Object.keys(r).sort()).toEqual(
      [
        "identifier",
        "parent_identifier",
        "license",
        "access_level",
        "derived_from",
        "created_at",
        "updated_at",
        "version",
        "children",
        "payload_type",
        ...Object.keys(sample),
      ].sort(),
    );

    // Connect JSON: the oneof member carries the payload; int64 as strings.
    const cj = await fetch(`${srv.url}/resourcestore.v2.ResourceService/Read`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ identifiers: [id] }),
    });
    expect(cj.status).toBe(200);
    const cjBody = (await cj.json()) as { resources: Record<string, unknown>[] };
    expect(cjBody.resources[0]).toMatchObject({ identifier: id, version: "1" });
    expect(Object.keys(cjBody.resources[0]![type] as object).sort()).toEqual(Object.keys(sample).sort());

    // gRPC (binary, HTTP/2) from grpc-js.
    const out = await grpcUnary(
      "/resourcestore.v1.ResourceService/Read",
      ReadRequestSchema,
      ReadResponseSchema,
      create(ReadRequestSchema, { identifiers: [id] }),
    );
    expect(out.resources).toHaveLength(1);
    expect(out.resources[0]!.payload.case).toBe(type);
    expect(out.resources[0]!.createdAt).toBe(r.created_at);
  });

  it("creates over gRPC and reads back over REST", async () => {
    const res = await grpcUnary(
      "/resourcestore.v2.ResourceService/Create",
      CreateRequestSchema,
      CreateResponseSchema,
      create(CreateRequestSchema, {
        resources: [{ identifier: "grpc-1", payload: { case: "study", value: { modality: "MR" } } }],
      }),
    );
    expect(res.created).toBe(1n);
    const read = await rest("/v2/resources/read", { identifiers: ["grpc-1"], exclude_children: true });
    expect(read.json).toEqual([
      expect.objectContaining({ identifier: "grpc-1", payload_type: "study", modality: "MR" }),
    ]);
    expect(read.json[0]).not.toHaveProperty("children");
  });

  it("serves the Connect protocol over HTTP/1.1 and gRPC over HTTP/2 from the same port", async () => {
    for (const transport of [
      createConnectTransport({ baseUrl: srv.url, httpVersion: "1.1" }),
      createGrpcTransport({ baseUrl: srv.url }),
    ]) {
      const client = createClient(ResourceService, transport);
      const res = await client.read({ identifiers: ["grpc-1", "missing", "grpc-1"] });
      expect(res.resources.map((r) => r.identifier)).toEqual(["grpc-1", "grpc-1"]);
    }
  });

  it("answers errors with the same code on every protocol", async () => {
    const bad = { resources: [{ identifier: "bad id!", payload_type: "study" }] };
    const r = await rest("/resources/create", bad);
    expect(r.status).toBe(400);
    expect(r.json.code).toBe("invalid_argument");
    const client = createClient(ResourceService, createGrpcTransport({ baseUrl: srv.url }));
    await expect(
      client.create({ resources: [{ identifier: "bad id!", payload: { case: "study", value: {} } }] }),
    ).rejects.toMatchObject({ code: 3 });
  });

  it("answers 404 not_found for unknown paths", async () => {
    const r = await rest("/nope");
    expect(r.status).toBe(404);
    expect(r.json.code).toBe("not_found");
  });

  it("reports health and readiness", async () => {
    expect((await rest("/healthz", undefined, "GET")).status).toBe(200);
    expect((await rest("/readyz", undefined, "GET")).status).toBe(200);
  });
});
