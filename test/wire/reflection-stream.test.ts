// Server reflection as gRPC tools speak it (buf curl, grpcurl, GUI clients):
// one bidi stream, kept open, one request at a time, each answered before
// the next is sent. Both grpc.reflection.v1 and v1alpha are served from the
// same descriptors. Raw HTTP/2 with framed messages, so nothing in a client
// library can paper over a server that waits for the end of the stream.
import http2 from "node:http2";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
  type ServerReflectionRequest,
  type ServerReflectionResponse,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { envelope } from "../support/envelopes.js";

let srv: TestServer;
beforeAll(async () => {
  srv = await startTestServer();
});
afterAll(async () => {
  await srv?.close();
});

/** An open gRPC stream: write one message, await the next answer, end when done. */
interface OpenStream {
  send(msg: Uint8Array): void;
  next(): Promise<Uint8Array>;
  /** Half-close and wait for the trailers. */
  finish(): Promise<string | undefined>;
}

function openStream(path: string): OpenStream {
  const session = http2.connect(srv.url);
  const stream = session.request({
    ":method": "POST",
    ":path": path,
    "content-type": "application/grpc+proto",
    te: "trailers",
  });
  let buf = Buffer.alloc(0);
  const messages: Uint8Array[] = [];
  const waiting: { resolve: (m: Uint8Array) => void; reject: (e: Error) => void }[] = [];
  let status: string | undefined;
  let failure: Error | undefined;
  const fail = (e: Error): void => {
    failure = e;
    for (const w of waiting.splice(0)) w.reject(e);
  };
  stream.on("data", (chunk: Buffer) => {
    buf = Buffer.concat([buf, chunk]);
    while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
      const len = buf.readUInt32BE(1);
      const msg = new Uint8Array(buf.subarray(5, 5 + len));
      buf = buf.subarray(5 + len);
      const w = waiting.shift();
      if (w) w.resolve(msg);
      else messages.push(msg);
    }
  });
  stream.on("response", (h) => (status = (h["grpc-status"] as string | undefined) ?? status));
  stream.on("trailers", (t) => (status = t["grpc-status"] as string | undefined));
  const ended = new Promise<void>((resolve) => stream.on("close", () => resolve()));
  stream.on("end", () => fail(new Error(`the stream ended (grpc-status ${status ?? "none"}) before the answer came`)));
  stream.on("error", fail);
  session.on("error", fail);
  return {
    send: (msg) => void stream.write(envelope(msg)),
    next: () => {
      const m = messages.shift();
      if (m) return Promise.resolve(m);
      if (failure) return Promise.reject(failure);
      return new Promise((resolve, reject) => waiting.push({ resolve, reject }));
    },
    async finish() {
      stream.end();
      await ended;
      session.close();
      return status;
    },
  };
}

type Req = ServerReflectionRequest["messageRequest"];
const request = (messageRequest: Req): Uint8Array =>
  toBinary(ServerReflectionRequestSchema, create(ServerReflectionRequestSchema, { host: "", messageRequest }));
const answer = (bytes: Uint8Array): ServerReflectionResponse["messageResponse"] =>
  fromBinary(ServerReflectionResponseSchema, bytes).messageResponse;

// v1alpha's messages carry the same fields under the same numbers as v1's,
// so v1's schemas encode and decode both on the wire.
describe.each(["v1", "v1alpha"])("grpc.reflection.%s over an open HTTP/2 stream", (version) => {
  const path = `/grpc.reflection.${version}.ServerReflection/ServerReflectionInfo`;

  it("answers each request before the client sends the next, without a half-close", async () => {
    const s = openStream(path);
    s.send(request({ case: "listServices", value: "" }));
    const listed = answer(await s.next());
    expect(listed.case).toBe("listServicesResponse");
    const names = listed.case === "listServicesResponse" ? listed.value.service.map((x) => x.name) : [];
    expect(names).toEqual(
      expect.arrayContaining([
        "resourcestore.v2.ResourceService",
        "resourcestore.v1.AdminService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
      ]),
    );

    // Only now the second request, on the same stream, still open.
    s.send(request({ case: "fileContainingSymbol", value: "resourcestore.v2.ResourceService" }));
    const files = answer(await s.next());
    expect(files.case).toBe("fileDescriptorResponse");
    const protos =
      files.case === "fileDescriptorResponse"
        ? files.value.fileDescriptorProto.map((b) => fromBinary(FileDescriptorProtoSchema, b))
        : [];
    expect(protos[0]?.name).toBe("resourcestore/v2/resource_service.proto");
    expect(protos[0]?.service.map((x) => x.name)).toContain("ResourceService");
    // The imports come along: a client can resolve ReadRequest without asking again.
    expect(protos.map((p) => p.name)).toEqual(expect.arrayContaining(["resourcestore/type/v1/resource.proto"]));

    s.send(request({ case: "fileByFilename", value: "no/such/file.proto" }));
    const missing = answer(await s.next());
    expect(missing.case).toBe("errorResponse");
    expect(missing.case === "errorResponse" ? missing.value.errorCode : undefined).toBe(5);

    expect(await s.finish()).toBe("0");
  });

  it(`describes the ${version} reflection service itself`, async () => {
    const s = openStream(path);
    s.send(request({ case: "fileContainingSymbol", value: `grpc.reflection.${version}.ServerReflection` }));
    const files = answer(await s.next());
    expect(files.case).toBe("fileDescriptorResponse");
    const file =
      files.case === "fileDescriptorResponse"
        ? fromBinary(FileDescriptorProtoSchema, files.value.fileDescriptorProto[0]!)
        : undefined;
    expect(file?.package).toBe(`grpc.reflection.${version}`);
    expect(file?.name).toBe(`grpc/reflection/${version}/reflection.proto`);
    expect(file?.service[0]?.method[0]).toMatchObject({
      name: "ServerReflectionInfo",
      clientStreaming: true,
      serverStreaming: true,
    });
    expect(file?.messageType.map((m) => m.name)).toEqual(
      expect.arrayContaining(["ServerReflectionRequest", "ServerReflectionResponse"]),
    );
    expect(await s.finish()).toBe("0");
  });

  it("a message that is not a reflection request ends the stream with invalid_argument, not internal", async () => {
    const s = openStream(path);
    s.send(request({ case: "listServices", value: "" }));
    expect(answer(await s.next()).case).toBe("listServicesResponse");
    s.send(Uint8Array.from([0x00, 0xff, 0xff, 0xff, 0xff, 0x0f]));
    await expect(s.next()).rejects.toThrow(/ended/);
    expect(await s.finish()).toBe("3");
  });
});
