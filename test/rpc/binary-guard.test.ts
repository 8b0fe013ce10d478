// The binary-body guard in front of connect's handlers, without a server: a
// bidi method's request messages reach the handler one by one while the
// request stream stays open, and a message that does not parse ends the
// call with invalid_argument.
import { create, toBinary } from "@bufbuild/protobuf";
import { createConnectRouter } from "@connectrpc/connect";
import type { UniversalServerRequest } from "@connectrpc/connect/protocol";
import { describe, expect, it } from "vitest";
import { ServerReflection, ServerReflectionRequestSchema } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { guardBinaryBodies } from "../../src/rpc/index.js";

/** A request body the test feeds by hand; it ends only when told. */
function openBody(): { body: AsyncIterable<Uint8Array>; push(b: Uint8Array): void; end(): void } {
  const queue: (Uint8Array | null)[] = [];
  let wake: (() => void) | undefined;
  return {
    push(b) {
      queue.push(b);
      wake?.();
    },
    end() {
      queue.push(null);
      wake?.();
    },
    body: {
      async *[Symbol.asyncIterator]() {
        for (;;) {
          while (queue.length === 0) await new Promise<void>((r) => (wake = r));
          const next = queue.shift()!;
          if (next === null) return;
          yield next;
        }
      },
    },
  };
}

const frame = (b: Uint8Array): Uint8Array => {
  const out = new Uint8Array(5 + b.length);
  new DataView(out.buffer).setUint32(1, b.length);
  out.set(b, 5);
  return out;
};
const listServices = (host: string): Uint8Array =>
  frame(
    toBinary(
      ServerReflectionRequestSchema,
      create(ServerReflectionRequestSchema, { host, messageRequest: { case: "listServices", value: "" } }),
    ),
  );

/** A bidi handler behind the guard that answers each request with its host. */
function guardedEcho() {
  const router = createConnectRouter();
  router.service(ServerReflection, {
    async *serverReflectionInfo(requests) {
      for await (const r of requests) yield { validHost: r.host };
    },
  });
  const handler = router.handlers.find((h) => h.method.name === "ServerReflectionInfo")!;
  return guardBinaryBodies(handler, 1024 * 1024);
}

function grpcRequest(body: AsyncIterable<Uint8Array>): UniversalServerRequest {
  return {
    httpVersion: "2.0",
    url: "http://localhost/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    method: "POST",
    header: new Headers({ "content-type": "application/grpc+proto", te: "trailers" }),
    body,
    signal: new AbortController().signal,
  };
}

describe("binary guard on a bidi stream", () => {
  it("hands each request message to the handler while the stream is open", async () => {
    const input = openBody();
    input.push(listServices("first"));
    const res = await guardedEcho()(grpcRequest(input.body));
    const out = (res.body as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
    const first = await out.next();
    expect(Buffer.from(first.value as Uint8Array).toString("latin1")).toContain("first");
    // The first answer came while the request stream is still open; now the second request.
    input.push(listServices("second"));
    const second = await out.next();
    expect(Buffer.from(second.value as Uint8Array).toString("latin1")).toContain("second");
    input.end();
    for (let r = await out.next(); r.done !== true; r = await out.next());
    expect(res.trailer?.get("grpc-status")).toBe("0");
  });

  it("a message split across chunks is passed on whole, and one that does not parse ends the call with invalid_argument", async () => {
    const input = openBody();
    const msg = listServices("split");
    input.push(msg.subarray(0, 3));
    const res = guardedEcho()(grpcRequest(input.body));
    input.push(msg.subarray(3));
    const out = ((await res).body as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
    expect(Buffer.from((await out.next()).value as Uint8Array).toString("latin1")).toContain("split");
    input.push(frame(Uint8Array.from([0x00, 0xff, 0xff, 0xff, 0xff, 0x0f])));
    for (let r = await out.next(); r.done !== true; r = await out.next());
    expect((await res).trailer?.get("grpc-status")).toBe("3");
  });
});
