// The planned binary encoder (src/protobuf/planned-binary.ts) against
// protobuf-es's toBinary, byte for byte: random messages of every message
// type the services use (requests, answers and everything they nest), and
// read answers holding each payload type. Values cover every scalar kind's
// edges (lone surrogates, -0, NaN, int64 extremes, negative int32 and enums),
// explicit presence, oneofs, packed lists and maps.
import { create, toBinary, type DescMessage, type Message } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  CreateRequestSchema,
  ReadResponseSchema,
  ResourceSchema,
} from "../../gen/resourcestore/type/v1/resource_pb.js";
import { createPlannedRequestInterceptor, encodedMessage, plannedToBinary } from "../../src/protobuf/index.js";
import { payloadTypes } from "../../src/schema/payload-registry.js";
import { messageArb, reachable } from "./arbitrary-messages.js";

function same(desc: DescMessage, msg: Message): void {
  const want = toBinary(desc, msg);
  expect(Buffer.from(plannedToBinary(desc, msg as never)).equals(Buffer.from(want))).toBe(true);
  // What connect serializes when the interceptor hands it the bytes.
  expect(
    Buffer.from(toBinary(desc, encodedMessage(desc, plannedToBinary(desc, msg as never)))).equals(Buffer.from(want)),
  ).toBe(true);
}

describe("plannedToBinary", () => {
  const types = reachable();

  it("reaches the read answer and many other types", () => {
    expect(types.map((t) => t.typeName)).toContain(ReadResponseSchema.typeName);
    expect(types.length).toBeGreaterThan(30);
  });

  it.each(types.map((t) => [t.typeName, t] as const))("writes what toBinary writes: %s", (_name, desc) => {
    fc.assert(
      fc.property(messageArb(desc), (msg) => same(desc, msg)),
      { numRuns: 60 },
    );
  });

  it.each([...payloadTypes.values()].map((t) => [t.name, t] as const))(
    "writes a read answer of %s resources as toBinary does",
    (_name, type) => {
      const resource = messageArb(ResourceSchema).chain((r) =>
        messageArb(type.message).map((payload) => {
          (r as unknown as { payload: unknown }).payload = { case: type.name, value: payload };
          return r;
        }),
      );
      fc.assert(
        fc.property(fc.array(resource, { maxLength: 5 }), (resources) =>
          same(ReadResponseSchema, create(ReadResponseSchema, { resources: resources as never })),
        ),
        { numRuns: 100 },
      );
    },
  );

  it("keeps unknown fields, after the known ones", () => {
    const msg = create(ResourceSchema, { identifier: "a", version: 3n });
    msg.$unknown = [{ no: 99, wireType: 0, data: new Uint8Array([5]) }];
    same(ResourceSchema, msg);
  });

  it("leaves a value the plan does not cover to toBinary, which refuses it as before", () => {
    const bad = create(ResourceSchema, { identifier: "a" });
    (bad as unknown as { version: unknown }).version = 2 ** 70; // not a bigint
    expect(() => toBinary(ResourceSchema, bad)).toThrow();
    expect(() => plannedToBinary(ResourceSchema, bad)).toThrow();
    const long = create(ResourceSchema, { identifier: "a" });
    (long as unknown as { version: unknown }).version = "12"; // a string int64 toBinary accepts
    expect(Buffer.from(plannedToBinary(ResourceSchema, long)).equals(Buffer.from(toBinary(ResourceSchema, long)))).toBe(
      true,
    );
  });

  it("encodes an empty message as no bytes", () => {
    expect(plannedToBinary(ReadResponseSchema, create(ReadResponseSchema)).byteLength).toBe(0);
    expect(toBinary(ReadResponseSchema, encodedMessage(ReadResponseSchema, new Uint8Array()))).toHaveLength(0);
  });
});

describe("createPlannedRequestInterceptor (the client's requests)", () => {
  type Next = Parameters<ReturnType<typeof createPlannedRequestInterceptor>>[0];
  const run = async (req: Record<string, unknown>): Promise<Record<string, unknown>> => {
    let seen: Record<string, unknown> | undefined;
    const next = ((r: Record<string, unknown>) => {
      seen = r;
      return Promise.resolve({});
    }) as unknown as Next;
    await createPlannedRequestInterceptor()(next)(req as never);
    return seen!;
  };

  it("hands the transport the planned bytes of a unary request: the same bytes toBinary writes", async () => {
    const message = create(CreateRequestSchema, {
      resources: [
        create(ResourceSchema, {
          identifier: "a",
          parentIdentifier: "p",
          payload: { case: "annotation", value: { label: "é ☃" } } as never,
        }),
        create(ResourceSchema, {
          identifier: "b",
          derivedFrom: ["a"],
          payload: { case: "study", value: { modality: "CT" } } as never,
        }),
      ],
    });
    const sent = await run({ stream: false, method: { input: CreateRequestSchema }, message });
    const shell = sent.message as typeof message;
    // A shell with no fields of its own: what it serializes to is the plan's output.
    expect(shell.resources).toHaveLength(0);
    expect(
      Buffer.from(toBinary(CreateRequestSchema, shell)).equals(Buffer.from(toBinary(CreateRequestSchema, message))),
    ).toBe(true);
  });

  it("leaves a streaming request alone", async () => {
    const message = (async function* () {})();
    const sent = await run({ stream: true, method: { input: CreateRequestSchema }, message });
    expect(sent.message).toBe(message);
  });
});
