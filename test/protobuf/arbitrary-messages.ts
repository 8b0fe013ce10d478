// Random protobuf-es messages of every message type the services use, for
// the planned binary encoder and decoder tests (src/protobuf): each field
// set or not, values at every scalar kind's edges (lone surrogates, -0, NaN,
// int64 extremes, negative int32 and enums), explicit presence, oneofs,
// packed lists and maps.
import { create, ScalarType, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { revisions } from "../schema/revisions.js";

type Init = Record<string, unknown>;

const text = fc.oneof(
  fc.constant(""),
  fc.string(),
  fc.string({ unit: "binary" }),
  fc.string({ unit: "grapheme", maxLength: 40 }),
);

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
      return fc.oneof(
        fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
        fc.constantFrom(0, -1, 127, 128, 2 ** 31 - 1, -(2 ** 31)),
      );
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return fc.oneof(fc.integer({ min: 0, max: 2 ** 32 - 1 }), fc.constantFrom(0, 127, 128, 2 ** 32 - 1));
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return fc.oneof(
        fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }),
        fc.constantFrom(0n, -1n, 127n, 128n, 2n ** 63n - 1n, -(2n ** 63n)),
      );
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
        f.listKind === "scalar"
          ? scalarArb(f.scalar)
          : f.listKind === "enum"
            ? fc.integer({ min: -3, max: 3 })
            : depth > 0
              ? messageArb(f.message, depth - 1)
              : undefined;
      return item === undefined ? undefined : fc.array(item, { maxLength: 4 });
    }
    case "map": {
      const value =
        f.mapKind === "scalar"
          ? scalarArb(f.scalar)
          : f.mapKind === "enum"
            ? fc.integer({ min: -3, max: 3 })
            : depth > 0
              ? messageArb(f.message, depth - 1)
              : undefined;
      if (value === undefined) return undefined;
      const key =
        f.mapKey === ScalarType.STRING
          ? text
          : f.mapKey === ScalarType.BOOL
            ? fc.constantFrom("true", "false")
            : fc.integer({ min: -1000, max: 1000 }).map(String);
      return fc.dictionary(key, value, { maxKeys: 3 });
    }
    default:
      return singleArb(f, depth);
  }
}

const arbs = new Map<string, fc.Arbitrary<Message>>();

/** Random messages of desc: each field set or not (implicit ones often at their zero value), one oneof member or none. */
export function messageArb(desc: DescMessage, depth = 3): fc.Arbitrary<Message> {
  const key = `${desc.typeName}/${depth}`;
  const known = arbs.get(key);
  if (known) return known;
  const parts: Record<string, fc.Arbitrary<unknown>> = {};
  for (const f of desc.fields) {
    if (f.oneof) continue;
    const a = fieldArb(f, depth);
    if (a === undefined) continue;
    parts[f.localName] =
      f.presence === FeatureSet_FieldPresence.IMPLICIT || f.fieldKind === "list" || f.fieldKind === "map"
        ? a
        : fc.option(a, { nil: undefined });
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

export function reachable(): DescMessage[] {
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
