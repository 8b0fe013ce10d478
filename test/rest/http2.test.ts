// The server hands the transcoder HTTP/2 compat objects too (h2c on the same
// port): the same answers must come back over HTTP/2.
import { connect, createServer } from "node:http2";
import type { ClientHttp2Session, Http2Server, OutgoingHttpHeaders } from "node:http2";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { ConnectError, Code, createRouterTransport } from "@connectrpc/connect";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import { ACCEPT_COMPRESSION } from "../../src/rpc/index.js";
import { createRestHandler } from "../../src/rest/index.js";
import { HttpBodySchema } from "../../gen/google/api/httpbody_pb.js";
import { QueryService } from "../../gen/resourcestore/v2/query_service_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";

const transport = createRouterTransport((router) => {
  router.service(ResourceService, {
    read: (req) => ({
      resources: req.identifiers.map((identifier) => ({
        identifier,
        payload: { case: "study", value: { modality: "CT" } },
      })),
    }),
    delete: () => {
      throw new ConnectError("dangling parent", Code.FailedPrecondition);
    },
  });
  router.service(QueryService, {
    queryParquet: () =>
      createAsyncIterable([
        create(HttpBodySchema, {
          contentType: "application/vnd.apache.parquet",
          data: new TextEncoder().encode("PAR1"),
        }),
        create(HttpBodySchema, { data: new TextEncoder().encode("PAR1") }),
      ]),
  });
});

let server: Http2Server;
let session: ClientHttp2Session;

beforeAll(async () => {
  const handler = createRestHandler({
    revisions: [{ name: "v2", services: [ResourceService, QueryService] }],
    transport,
    maxBodyBytes: 64,
    acceptCompression: ACCEPT_COMPRESSION,
  });
  server = createServer((req, res) => {
    void handler(req, res).then((handled) => {
      if (!handled) {
        res.writeHead(404);
        res.end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  session = connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
});

afterAll(async () => {
  session.close();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

function request(path: string, body: string): Promise<{ status: number; headers: OutgoingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":method": "POST", ":path": path, "content-type": "application/json" });
    const chunks: Buffer[] = [];
    let headers: OutgoingHttpHeaders = {};
    stream.on("response", (h) => (headers = h));
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("end", () => resolve({ status: Number(headers[":status"]), headers, body: Buffer.concat(chunks) }));
    stream.on("error", reject);
    stream.end(body);
  });
}

describe("REST over HTTP/2", () => {
  it("answers flat JSON", async () => {
    const res = await request("/resources/read", JSON.stringify({ identifiers: ["s1"], exclude_children: true }));
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("application/json");
    expect(JSON.parse(res.body.toString())).toEqual([
      {
        identifier: "s1",
        parent_identifier: null,
        license: null,
        derived_from: [],
        created_at: "",
        updated_at: "",
        version: 0,
        payload_type: "study",
        modality: "CT",
      },
    ]);
  });

  it("answers errors and 413 without a connection header", async () => {
    const failed = await request("/v2/resources/delete", "{}");
    expect(failed.status).toBe(400);
    expect(JSON.parse(failed.body.toString())).toEqual({
      code: "failed_precondition",
      message: "dangling parent",
      reason: "FAILED_PRECONDITION",
    });
    const big = await request("/resources/read", JSON.stringify({ identifiers: ["x".repeat(100)] }));
    expect(big.status).toBe(413);
    expect(JSON.parse(big.body.toString())).toMatchObject({ code: "resource_exhausted" });
  });

  it("streams HttpBody", async () => {
    const res = await request("/query/parquet", "{}");
    expect(res.headers["content-type"]).toBe("application/vnd.apache.parquet");
    expect(res.body.toString()).toBe("PAR1PAR1");
  });
});
