// The client's gRPC transport decodes unary answers by plan
// (src/client/grpc-transport.ts): the same messages and the same errors as
// connect-node's own gRPC transport, which decodes them by reflection.
import { createServer, type Http2Server, type ServerHttp2Session } from "node:http2";
import type { AddressInfo } from "node:net";
import { createClient, ConnectError } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { HistoryResponseSchema, ReadResponseSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { createResourceStoreClient } from "../../src/client/index.js";
import { createPlannedRequestInterceptor } from "../../src/protobuf/index.js";
import type * as Protobuf from "../../src/protobuf/index.js";
import { startTestServer, type TestServer } from "../support/app.js";

const decoded = vi.hoisted(() => [] as string[]);
vi.mock("../../src/protobuf/index.js", async (original) => {
  const m = await original<typeof Protobuf>();
  return {
    ...m,
    plannedFromBinary: (desc: Parameters<typeof m.plannedFromBinary>[0], bytes: Uint8Array) => {
      decoded.push(desc.typeName);
      return m.plannedFromBinary(desc, bytes);
    },
  };
});

let srv: TestServer;
beforeAll(async () => {
  srv = await startTestServer();
});
afterAll(async () => {
  await srv?.close();
});

/** connect-node's gRPC transport as the client builds it, answers decoded by reflection. */
function reflective(baseUrl: string) {
  return createClient(ResourceService, createGrpcTransport({ baseUrl, interceptors: [createPlannedRequestInterceptor()], acceptCompression: [] }));
}

describe("the client's gRPC transport", () => {
  it("decodes unary answers by plan, into the messages reflection gives", async () => {
    const client = createResourceStoreClient({ baseUrl: srv.url, transport: "grpc" });
    const ids = ["cp-1", "cp-2"];
    await client.resources.create({ resources: ids.map((identifier) => ({ identifier, payload: { case: "study", value: { modality: "CT", description: "é ✓" } } })) });
    for (let v = 0; v < 3; v++) await client.resources.update({ updates: { "cp-1": { license: `L-${v}` } } });
    await client.resources.delete({ identifiers: ["cp-2"] });
    await client.resources.restore({ identifiers: ["cp-2"] });

    decoded.length = 0;
    const planned = await client.resources.history({ identifier: "cp-1", limit: 2 });
    const read = await client.resources.read({ identifiers: ids });
    // The server in this process decodes its requests by plan too.
    expect(decoded.filter((t) => t.endsWith("Response"))).toEqual([HistoryResponseSchema.typeName, ReadResponseSchema.typeName]);

    const other = reflective(srv.url);
    expect(planned).toEqual(await other.history({ identifier: "cp-1", limit: 2 }));
    expect(planned.versions).toHaveLength(2);
    expect(planned.nextCursor).not.toBe("");
    expect(read).toEqual(await other.read({ identifiers: ids }));
    const restored = await client.resources.history({ identifier: "cp-2" });
    expect(restored.versions.map((v) => v.kind)).toEqual(["created", "deleted", "restored"]);
    expect(restored).toEqual(await other.history({ identifier: "cp-2" }));
  });

  it("answers the errors connect's transport answers", async () => {
    const client = createResourceStoreClient({ baseUrl: srv.url, transport: "grpc" });
    const failure = async (call: Promise<unknown>) => {
      const err = await call.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ConnectError);
      const { code, rawMessage } = err as ConnectError;
      return { code, rawMessage };
    };
    expect(await failure(client.resources.history({ identifier: "cp-none" }))).toEqual(await failure(reflective(srv.url).history({ identifier: "cp-none" })));
  });
});

describe("an answer that is not a valid message", () => {
  let bad: Http2Server;
  let url: string;
  const sessions = new Set<ServerHttp2Session>();
  beforeAll(async () => {
    // A gRPC server whose one answer is a truncated field (tag 1, length 5, no bytes).
    bad = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/grpc+proto" });
      res.addTrailers({ "grpc-status": "0" });
      res.end(Buffer.from([0, 0, 0, 0, 2, 0x0a, 0x05]));
    });
    bad.on("session", (s) => sessions.add(s));
    await new Promise<void>((resolve) => bad.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(bad.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    // The clients keep their sessions open: end them, or close waits for them.
    for (const s of sessions) s.destroy();
    await new Promise((resolve) => bad.close(resolve));
  });

  it("fails as connect's transport fails: internal, parse binary", async () => {
    const outcome = async (call: Promise<unknown>) =>
      call.then(
        () => "answered",
        (e: unknown) => (e instanceof ConnectError ? { code: e.code, message: e.rawMessage } : String(e)),
      );
    const ours = await outcome(createResourceStoreClient({ baseUrl: url, transport: "grpc" }).resources.history({ identifier: "x" }));
    expect(ours).toEqual(await outcome(reflective(url).history({ identifier: "x" })));
    expect(ours).toMatchObject({ message: expect.stringMatching(/^parse binary: /) as unknown });
  });
});
