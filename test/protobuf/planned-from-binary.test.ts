// The planned binary decoder (src/protobuf/planned-from-binary.ts) against
// protobuf-es's fromBinary: the very same message (toStrictEqual: the same
// own properties, undefined ones included, the same values and types) for
// random messages of every message type the services use, for create
// requests holding each payload type, for input written in the ways the
// encoder never writes (unpacked lists, fields repeated or out of order, a
// message field met twice, map entries missing a key or value, int32 as
// 5-byte varints), and the same error for input fromBinary refuses.
import { create, fromBinary, ScalarType, toBinary, type DescMessage } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  CreateRequestSchema,
  ResourceSchema,
  UpdateRequestSchema,
} from "../../gen/resourcestore/type/v1/resource_pb.js";
import { decodesByPlan, plannedFromBinary } from "../../src/protobuf/index.js";
import { payloadTypes } from "../../src/schema/payload-registry.js";
import { messageArb, reachable } from "./arbitrary-messages.js";

function same(desc: DescMessage, bytes: Uint8Array): void {
  let want: unknown;
  let error: unknown;
  try {
    want = fromBinary(desc, bytes);
  } catch (e) {
    error = e;
  }
  if (error !== undefined) expect(() => plannedFromBinary(desc, bytes)).toThrow((error as Error).message);
  else expect(plannedFromBinary(desc, bytes)).toStrictEqual(want);
}

/** A tag's bytes. */
function tag(no: number, wire: number): number[] {
  return varint((no << 3) | wire);
}

function varint(n: number): number[] {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return out;
}

function str(no: number, s: string): number[] {
  const b = [...Buffer.from(s, "utf8")];
  return [...tag(no, 2), ...varint(b.length), ...b];
}

function nested(no: number, body: number[]): number[] {
  return [...tag(no, 2), ...varint(body.length), ...body];
}

describe("plannedFromBinary", () => {
  const types = reachable();

  it("plans the create request; a type it cannot plan goes to fromBinary whole", () => {
    expect(decodesByPlan(CreateRequestSchema)).toBe(true);
    // An update may carry payload_fields (google.protobuf.Struct, a plain JSON object in protobuf-es).
    expect(decodesByPlan(UpdateRequestSchema)).toBe(false);
    expect(decodesByPlan(ResourceSchema)).toBe(true);
  });

  it.each(types.map((t) => [t.typeName, t] as const))("gives what fromBinary gives: %s", (_name, desc) => {
    fc.assert(
      fc.property(messageArb(desc), (msg) => same(desc, toBinary(desc, msg))),
      { numRuns: 60 },
    );
  });

  it.each([...payloadTypes.values()].map((t) => [t.name, t] as const))(
    "decodes a create request of %s resources as fromBinary does",
    (_name, type) => {
      const resource = messageArb(ResourceSchema).chain((r) =>
        messageArb(type.message).map((payload) => {
          (r as unknown as { payload: unknown }).payload = { case: type.name, value: payload };
          return r;
        }),
      );
      fc.assert(
        fc.property(fc.array(resource, { maxLength: 5 }), (resources) =>
          same(
            CreateRequestSchema,
            toBinary(CreateRequestSchema, create(CreateRequestSchema, { resources: resources as never })),
          ),
        ),
        { numRuns: 100 },
      );
    },
  );

  it("decodes input in the forms the encoder does not write as fromBinary does", () => {
    const f = ResourceSchema.fields;
    const no = (name: string) => f.find((x) => x.localName === name)!.number;
    const derived = no("derivedFrom");
    const version = no("version");
    const payloadFile = f.find((x) => x.oneof !== undefined && x.localName === "file")!;
    const fileNo = payloadFile.number;
    const fileFields = payloadFile.message!.fields;
    const fileString = fileFields.find((x) => x.fieldKind === "scalar" && x.scalar === ScalarType.STRING)!;
    const cases: number[][] = [
      // fields out of order, a scalar repeated (the last wins), a list item split around other fields
      [
        ...str(derived, "b"),
        ...str(no("identifier"), "x"),
        ...tag(version, 0),
        5,
        ...str(derived, "c"),
        ...tag(version, 0),
        7,
      ],
      // the oneof's message met twice: merged
      [...nested(fileNo, str(fileString.number, "one")), ...nested(fileNo, [])],
      [...nested(fileNo, []), ...nested(fileNo, str(fileString.number, "two"))],
      // an int64 as a 10-byte varint (-1), a 0 written explicitly
      [...tag(version, 0), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
      [...tag(version, 0), 0],
      // an empty body
      [],
    ];
    for (const c of cases) same(ResourceSchema, new Uint8Array(c));
  });

  it("decodes map entries missing a key or a value, and repeated keys, as fromBinary does", () => {
    const withMap = types.flatMap((d) => d.fields.filter((x) => x.fieldKind === "map").map((x) => [d, x] as const));
    expect(withMap.length).toBeGreaterThan(0);
    for (const [desc, field] of withMap) {
      const entries = [
        nested(field.number, str(1, "k")),
        nested(field.number, []),
        nested(field.number, [...str(1, "k"), ...str(1, "k")]),
      ];
      for (const e of entries) same(desc, new Uint8Array(e));
    }
  });

  it("leaves what the plan does not cover to fromBinary: unknown fields, wrong wire types, bad UTF-8, truncation", () => {
    const id = ResourceSchema.fields.find((x) => x.localName === "identifier")!.number;
    const version = ResourceSchema.fields.find((x) => x.localName === "version")!.number;
    const cases: number[][] = [
      [...tag(999, 0), 1], // unknown: kept in $unknown
      [...tag(999, 2), 2, 0x41, 0x42, ...str(id, "a")],
      [...tag(version, 2), 1, 5], // a varint field as length-delimited
      [...tag(id, 2), 2, 0xc3, 0x28], // invalid UTF-8: fromBinary refuses
      [...str(id, "a\uFFFDb")], // a real U+FFFD: decoded
      [...tag(id, 2), 5, 0x41], // truncated
      [...tag(version, 0), 0xff], // truncated varint
      [...tag(id, 3)], // a group start
    ];
    for (const c of cases) same(ResourceSchema, new Uint8Array(c));
  });

  it("refuses malformed input with fromBinary's error, and decodes a message as fromBinary does whatever its bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 60 }), (bytes) => same(ResourceSchema, bytes)),
      { numRuns: 2000 },
    );
  });
});
