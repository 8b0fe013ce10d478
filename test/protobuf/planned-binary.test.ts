// The planned binary encoder (src/protobuf/planned-binary.ts) against
// protobuf-es's toBinary, byte for byte: random messages of every message
// type the services use (requests, answers and everything they nest), and
// read answers holding each payload type. Values cover every scalar kind's
// edges (lone surrogates, -0, NaN, int64 extremes, negative int32 and enums),
// explicit presence, oneofs, packed lists and maps.
import { create, ScalarType, toBinary, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CreateRequestSchema, ReadResponseSchema, ResourceSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { createPlannedRequestInterceptor, encodedMessage, plannedToBinary } from "../../src/protobuf/index.js";
import { payloadTypes } from "../../src/schema/payload-registry.js";
import { revisions } from "../schema/revisions.js";

type Init = Record<string, unknown>;

const text = fc.oneof(fc.constant(""), fc.string(), fc.string({ unit: "binary" }), fc.string({ unit: "grapheme", maxLength: 40 }));

function scalarArb(type: ScalarType): fc.Arbitrary<unknown> {
  switch (type) {
    case ScalarType.STRING:
      return text;
    case ScalarType.BOOL:
      return fc.boolean();
    case ScalarType.DOUBLE:
      return fc.oneof(fc.double(), fc.constantFrom(0, -0, NaN, Infinity, -Infinity, 1e300));
    case ScalarType.FLOAT:
      return fc.float();
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return fc.oneof(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), fc.constantFrom(0, -1, 127, 128, 2 ** 31 - 1, -(2 ** 31)));
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return fc.oneof(fc.integer({ min: 0, max: 2 ** 32 - 1 }), fc.constantFrom(0, 127, 128, 2 ** 32 - 1));
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return fc.oneof(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), fc.constantFrom(0n, -1n, 127n, 128n, 2n ** 63n - 1n, -(2n ** 63n)));
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return fc.bigInt({ min: 0n, max: 2n ** 64n - 1n });
    case ScalarType.BYTES:
      return fc.uint8Array({ maxLength: 20 });
  }
}

function singleArb(f: DescField, depth: number): fc.Arbitrary<unknown> | undefined {
  switch (f.fieldKind) {
    case "scalar":
      return scalarArb(f.scalar);
    case "enum":
      return fc.oneof(fc.constantFrom(...f.enum.values.map((v) => v.number)), fc.integer({ min: -5, max: 5 }));
    case "message":
      return depth > 0 ? messageArb(f.message, depth - 1) : undefined;
    default:
      return undefined;
  }
}

function fieldArb(f: DescField, depth: number): fc.Arbitrary<unknown> | undefined {
  switch (f.fieldKind) {
    case "list": {
      const item =
        f.listKind === "scalar" ? scalarArb(f.scalar) : f.listKind === "enum" ? fc.integer({ min: -3, max: 3 }) : depth > 0 ? messageArb(f.message, depth - 1) : undefined;
      return item === undefined ? undefined : fc.array(item, { maxLength: 4 });
    }
    case "map": {
      const value =
        f.mapKind === "scalar" ? scalarArb(f.scalar) : f.mapKind === "enum" ? fc.integer({ min: -3, max: 3 }) : depth > 0 ? messageArb(f.message, depth - 1) : undefined;
      if (value === undefined) return undefined;
      const key =
        f.mapKey === ScalarType.STRING ? text : f.mapKey === ScalarType.BOOL ? fc.constantFrom("true", "false") : fc.integer({ min: -1000, max: 1000 }).map(String);
      return fc.dictionary(key, value, { maxKeys: 3 });
    }
    default:
      return singleArb(f, depth);
  }
}

const arbs = new Map<string, fc.Arbitrary<Message>>();

/** Random messages of desc: each field set or not (implicit ones often at their zero value), one oneof member or none. */
function messageArb(desc: DescMessage, depth = 3): fc.Arbitrary<Message> {
  const key = `${desc.typeName}/${depth}`;
  const known = arbs.get(key);
  if (known) return known;
  const parts: Record<string, fc.Arbitrary<unknown>> = {};
  for (const f of desc.fields) {
    if (f.oneof) continue;
    const a = fieldArb(f, depth);
    if (a === undefined) continue;
    parts[f.localName] = f.presence === FeatureSet_FieldPresence.IMPLICIT || f.fieldKind === "list" || f.fieldKind === "map" ? a : fc.option(a, { nil: undefined });
  }
  for (const o of desc.oneofs) {
    const members = o.fields.flatMap((f) => {
      const a = singleArb(f, depth);
      return a === undefined ? [] : [a.map((value) => ({ case: f.localName, value }))];
    });
    parts[o.localName] = fc.oneof(fc.constant({ case: undefined }), ...members);
  }
  const arb = fc.record(parts).map((init) => {
    const clean: Init = {};
    for (const [k, v] of Object.entries(init)) if (v !== undefined) clean[k] = v;
    return create(desc, clean as never);
  });
  arbs.set(key, arb);
  return arb;
}

function reachable(): DescMessage[] {
  const seen = new Map<string, DescMessage>();
  const visit = (d: DescMessage) => {
    if (seen.has(d.typeName)) return;
    seen.set(d.typeName, d);
    for (const f of d.fields) if (f.message !== undefined) visit(f.message);
  };
  for (const r of revisions) {
    for (const s of r.services) {
      for (const m of s.methods) {
        visit(m.input);
        visit(m.output);
      }
    }
  }
  return [...seen.values()];
}

function same(desc: DescMessage, msg: Message): void {
  const want = toBinary(desc, msg);
  expect(Buffer.from(plannedToBinary(desc, msg as never)).equals(Buffer.from(want))).toBe(true);
  // What connect serializes when the interceptor hands it the bytes.
  expect(Buffer.from(toBinary(desc, encodedMessage(desc, plannedToBinary(desc, msg as never)))).equals(Buffer.from(want))).toBe(true);
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

  it.each([...payloadTypes.values()].map((t) => [t.name, t] as const))("writes a read answer of %s resources as toBinary does", (_name, type) => {
    const resource = messageArb(ResourceSchema).chain((r) =>
      messageArb(type.message).map((payload) => {
        (r as unknown as { payload: unknown }).payload = { case: type.name, value: payload };
        return r;
      }),
    );
    fc.assert(
      fc.property(fc.array(resource, { maxLength: 5 }), (resources) => same(ReadResponseSchema, create(ReadResponseSchema, { resources: resources as never }))),
      { numRuns: 100 },
    );
  });

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
    expect(Buffer.from(plannedToBinary(ResourceSchema, long)).equals(Buffer.from(toBinary(ResourceSchema, long)))).toBe(true);
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
        create(ResourceSchema, { identifier: "a", parentIdentifier: "p", payload: { case: "annotation", value: { label: "é ☃" } } as never }),
        create(ResourceSchema, { identifier: "b", derivedFrom: ["a"], payload: { case: "study", value: { modality: "CT" } } as never }),
      ],
    });
    const sent = await run({ stream: false, method: { input: CreateRequestSchema }, message });
    const shell = sent.message as typeof message;
    // A shell with no fields of its own: what it serializes to is the plan's output.
    expect(shell.resources).toHaveLength(0);
    expect(Buffer.from(toBinary(CreateRequestSchema, shell)).equals(Buffer.from(toBinary(CreateRequestSchema, message)))).toBe(true);
  });

  it("leaves a streaming request alone", async () => {
    const message = (async function* () {})();
    const sent = await run({ stream: true, method: { input: CreateRequestSchema }, message });
    expect(sent.message).toBe(message);
  });
});
