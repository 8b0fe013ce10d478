// A body that is not a protobuf message of the method's input type is
// invalid_argument in every protocol (connect-es alone would answer internal),
// and a valid binary body still works after the guard has parsed it.
import http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReadRequestSchema, ReadResponseSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { fromBinary } from "@bufbuild/protobuf";
import { startTestServer, type TestServer } from "../support/app.js";

let srv: TestServer;
beforeAll(async () => {
  srv = await startTestServer();
});
afterAll(async () => {
  await srv?.close();
});

const PATH = "/resourcestore.v2.ResourceService/Read";
const GARBAGE = Uint8Array.from([0x00, 0xff, 0xff, 0xff, 0xff, 0x0f]);
const frame = (b: Uint8Array) => Buffer.concat([Buffer.from([0, 0, 0, 0, b.length]), b]);

function grpcCall(
  body: Uint8Array,
): Promise<{ status: string | undefined; message: string | undefined; data: Buffer }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(srv.url);
    session.on("error", reject);
    const req = session.request({
      ":method": "POST",
      ":path": PATH,
      "content-type": "application/grpc+proto",
      te: "trailers",
    });
    const chunks: Buffer[] = [];
    let headers: http2.IncomingHttpHeaders = {};
    req.on("response", (h) => (headers = h));
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("trailers", (t) => (headers = { ...headers, ...t }));
    req.on("end", () => {
      session.close();
      resolve({
        status: headers["grpc-status"] as string | undefined,
        message: headers["grpc-message"] as string | undefined,
        data: Buffer.concat(chunks),
      });
    });
    req.on("error", reject);
    req.end(frame(body));
  });
}

describe("binary garbage", () => {
  it("Connect: 400 invalid_argument", async () => {
    const res = await fetch(srv.url + PATH, {
      method: "POST",
      headers: { "content-type": "application/proto" },
      body: GARBAGE,
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("ReadRequest"),
    });
  });

  it("gRPC: status 3 (invalid_argument)", async () => {
    const r = await grpcCall(GARBAGE);
    expect(r.status).toBe("3");
  });

  it("gRPC-web: status 3 in the trailer frame", async () => {
    const res = await fetch(srv.url + PATH, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+proto" },
      body: frame(GARBAGE),
    });
    const text = Buffer.from(await res.arrayBuffer()).toString("latin1");
    expect(res.headers.get("grpc-status") ?? /grpc-status:\s*(\d+)/.exec(text)?.[1]).toBe("3");
  });

  it("a valid binary message still goes through, over Connect and gRPC", async () => {
    const msg = toBinary(ReadRequestSchema, create(ReadRequestSchema, { identifiers: ["nothing-here"] }));
    const res = await fetch(srv.url + PATH, {
      method: "POST",
      headers: { "content-type": "application/proto" },
      body: msg,
    });
    expect(res.status).toBe(200);
    expect(fromBinary(ReadResponseSchema, new Uint8Array(await res.arrayBuffer())).resources).toEqual([]);
    const r = await grpcCall(msg);
    expect(r.status).toBe("0");
  });
});
