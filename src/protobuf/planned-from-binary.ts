// Protobuf binary decoding by a plan per message type, read once from the
// descriptors, giving the same message as protobuf-es's reflective
// `fromBinary`: zero values as `create` sets them, oneof members as
// {case, value}, a singular message field met twice merged, repeated
// scalars packed or not, map entries with a missing key or value at its
// zero value, the last value of a scalar winning. fromBinary through
// reflection was four fifths of a gRPC create's server CPU (docs/benchmarks/writers.md,
// "Create and read lines").
//
// The plan covers the message types planned-binary.ts plans (the same
// scalar kinds, string map keys, no groups, no wrappers or Struct) and only
// well-formed input it expects: a wire type that is not the field's, an
// unknown field, a string that is not valid UTF-8, a truncated or overlong
// value, a nesting deeper than fromBinary's limit: any of these sends the
// whole message to fromBinary itself, which decodes it or raises its own
// error. test/protobuf/planned-from-binary.test.ts compares both.
import { fromBinary, ScalarType, type DescField, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { Edition, FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { planCache, type Coverage } from "./plans.js";

type Rec = Record<string, unknown>;

/** Thrown for input the plan does not cover: the message goes to fromBinary instead. */
const FALLBACK = new Error("not covered by the plan");

/** fromBinary's default recursion limit. */
const MAX_DEPTH = 100;

/** Wire types. */
const Wire = { Varint: 0, Bit64: 1, LengthDelimited: 2 } as const;

class Reader {
  pos = 0;
  depth = 0;
  readonly view: DataView;
  /** The same bytes as a Buffer, for its native UTF-8 decoding. */
  readonly text: Buffer;
  constructor(readonly buf: Uint8Array) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    this.text = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  }
  /** A varint of at most 32 significant bits (longer ones: fromBinary). */
  uint32(): number {
    const b = this.buf;
    let n = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      if (this.pos >= b.length) throw FALLBACK;
      const x = b[this.pos++]!;
      n += (x & 0x7f) * 2 ** shift;
      if (x < 0x80) {
        if (n > 0xffffffff) throw FALLBACK;
        return n;
      }
    }
    throw FALLBACK;
  }
  /** A full 64-bit varint, as an unsigned bigint. */
  uint64(): bigint {
    const b = this.buf;
    let lo = 0;
    let hi = 0n;
    for (let shift = 0; shift < 70; shift += 7) {
      if (this.pos >= b.length) throw FALLBACK;
      const x = b[this.pos++]!;
      if (shift < 28) lo += (x & 0x7f) * 2 ** shift;
      else hi |= BigInt(x & 0x7f) << BigInt(shift);
      if (x < 0x80) {
        if (shift === 63 && x > 1) throw FALLBACK; // more than 64 bits
        return hi | BigInt(lo);
      }
    }
    throw FALLBACK;
  }
  /** An int32 as protobuf writes it (negative values as 10-byte varints): the low 32 bits, signed. */
  int32(): number {
    const b = this.buf;
    const start = this.pos;
    let n = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      if (this.pos >= b.length) throw FALLBACK;
      const x = b[this.pos++]!;
      n += (x & 0x7f) * 2 ** shift;
      if (x < 0x80) return n | 0;
    }
    this.pos = start;
    return Number(BigInt.asIntN(32, this.uint64()));
  }
  end(len: number): number {
    const e = this.pos + len;
    if (e > this.buf.length) throw FALLBACK;
    return e;
  }
  string(): string {
    const e = this.end(this.uint32());
    const s = this.text.toString("utf8", this.pos, e);
    // U+FFFD stands for invalid UTF-8 (or is itself in the text): fromBinary decides which.
    if (s.includes("\uFFFD")) throw FALLBACK;
    this.pos = e;
    return s;
  }
  double(): number {
    if (this.pos + 8 > this.buf.length) throw FALLBACK;
    const d = this.view.getFloat64(this.pos, true);
    this.pos += 8;
    return d;
  }
}

/** One scalar kind: its wire type, its zero value and how to read it. */
interface ScalarPlan {
  readonly wire: number;
  readonly zero: unknown;
  readonly read: (r: Reader) => unknown;
}

const SCALARS: Partial<Record<ScalarType, ScalarPlan>> = {
  [ScalarType.STRING]: { wire: Wire.LengthDelimited, zero: "", read: (r) => r.string() },
  [ScalarType.BOOL]: { wire: Wire.Varint, zero: false, read: (r) => r.uint64() !== 0n },
  [ScalarType.DOUBLE]: { wire: Wire.Bit64, zero: 0, read: (r) => r.double() },
  [ScalarType.INT32]: { wire: Wire.Varint, zero: 0, read: (r) => r.int32() },
  [ScalarType.UINT32]: { wire: Wire.Varint, zero: 0, read: (r) => r.int32() >>> 0 },
  [ScalarType.INT64]: { wire: Wire.Varint, zero: 0n, read: (r) => BigInt.asIntN(64, r.uint64()) },
};

/** Reads field `f`'s value (its tag read, with wire type `wire`) into `msg`. */
type FieldReader = (msg: Rec, r: Reader, wire: number) => void;

interface MessagePlan {
  readonly typeName: string;
  /** The zero message as `create` makes it (no prototype chain in proto3). */
  zero: () => Rec;
  /** By field number. */
  fields: Map<number, FieldReader>;
}

/**
 * Narrower than the encoder's coverage: proto3 only (proto2 and editions may
 * keep defaults on a prototype), no int64 as string (longAsString; map
 * values never are), no closed enums.
 */
const DECODER: Coverage = {
  scalar: (t) => SCALARS[t] !== undefined,
  message: (desc) => desc.file.edition === Edition.EDITION_PROTO3,
  field(f) {
    switch (f.fieldKind) {
      case "scalar":
        return !f.longAsString;
      case "enum":
        return f.enum.open;
      case "list":
        return f.listKind === "scalar" ? !f.longAsString : f.listKind === "enum" ? f.enum.open : true;
      case "map":
        return f.mapKind === "enum" ? f.enum.open : true;
      case "message":
        return true;
    }
  },
};

const { planOf, build } = planCache<MessagePlan>(
  DECODER,
  (desc) => ({ typeName: desc.typeName, zero: () => ({}), fields: new Map() }),
  (desc, plan) => {
    const set: [string, () => unknown][] = [];
    for (const m of desc.members) {
      if (m.kind === "oneof") set.push([m.localName, () => ({ case: undefined })]);
      else if (m.presence === FeatureSet_FieldPresence.IMPLICIT) set.push([m.localName, zeroOf(m)]);
    }
    const typeName = desc.typeName;
    plan.zero = () => {
      const msg: Rec = { $typeName: typeName };
      for (const [name, zero] of set) msg[name] = zero();
      return msg;
    };
    for (const f of desc.fields) plan.fields.set(f.number, fieldReader(f));
  },
);

function scalarOf(f: DescField & { fieldKind: "scalar" | "enum" }): ScalarPlan {
  return f.fieldKind === "enum" ? SCALARS[ScalarType.INT32]! : SCALARS[f.scalar]!;
}

/** The zero value `create` gives a member that it sets (a oneof, or a field with implicit presence). */
function zeroOf(f: DescField): () => unknown {
  switch (f.fieldKind) {
    case "list":
      return () => [];
    case "map":
      return () => ({});
    case "enum": {
      const z = f.enum.values[0]!.number;
      return () => z;
    }
    case "scalar": {
      const z = SCALARS[f.scalar]!.zero;
      return () => z;
    }
    case "message":
      return () => undefined;
  }
}

/** A nested message, merged into `into` when given (a singular field met twice). */
function readMessage(plan: MessagePlan, r: Reader, into?: Rec): Rec {
  const end = r.end(r.uint32());
  if (++r.depth > MAX_DEPTH) throw FALLBACK;
  const msg = into ?? plan.zero();
  readFields(plan, msg, r, end);
  r.depth--;
  return msg;
}

function readFields(plan: MessagePlan, msg: Rec, r: Reader, end: number): void {
  while (r.pos < end) {
    const tag = r.uint32();
    const field = plan.fields.get(tag >>> 3);
    if (field === undefined) throw FALLBACK; // unknown fields: fromBinary keeps them
    field(msg, r, tag & 7);
  }
  if (r.pos !== end) throw FALLBACK;
}

function fieldReader(f: DescField): FieldReader {
  const name = f.localName;
  // Where a value goes: the field itself, or its oneof as {case, value}.
  const group = f.oneof?.localName;
  const put: (msg: Rec, v: unknown) => void =
    group === undefined ? (msg, v) => void (msg[name] = v) : (msg, v) => void (msg[group] = { case: name, value: v });
  switch (f.fieldKind) {
    case "scalar":
    case "enum": {
      const s = scalarOf(f);
      return (msg, r, wire) => {
        if (wire !== s.wire) throw FALLBACK;
        put(msg, s.read(r));
      };
    }
    case "message": {
      const plan = build(f.message);
      const current: (msg: Rec) => Rec | undefined =
        group === undefined
          ? (msg) => msg[name] as Rec | undefined
          : (msg) => {
              const o = msg[group] as { case: string | undefined; value?: Rec };
              return o.case === name ? o.value : undefined;
            };
      return (msg, r, wire) => {
        if (wire !== Wire.LengthDelimited) throw FALLBACK;
        const before = current(msg);
        const value = readMessage(plan, r, before);
        if (before === undefined) put(msg, value);
      };
    }
    case "list": {
      if (f.listKind === "message") {
        const plan = build(f.message);
        return (msg, r, wire) => {
          if (wire !== Wire.LengthDelimited) throw FALLBACK;
          (msg[name] as unknown[]).push(readMessage(plan, r));
        };
      }
      const s = f.listKind === "enum" ? SCALARS[ScalarType.INT32]! : SCALARS[f.scalar]!;
      const packable = s.wire !== Wire.LengthDelimited;
      return (msg, r, wire) => {
        const list = msg[name] as unknown[];
        if (packable && wire === Wire.LengthDelimited) {
          const end = r.end(r.uint32());
          while (r.pos < end) list.push(s.read(r));
          if (r.pos !== end) throw FALLBACK;
          return;
        }
        if (wire !== s.wire) throw FALLBACK;
        list.push(s.read(r));
      };
    }
    case "map": {
      const key = SCALARS[ScalarType.STRING]!;
      const valuePlan = f.mapKind === "message" ? build(f.message) : undefined;
      const s =
        f.mapKind === "enum" ? SCALARS[ScalarType.INT32]! : f.mapKind === "scalar" ? SCALARS[f.scalar]! : undefined;
      const zero = f.mapKind === "enum" ? f.enum.values[0]!.number : s?.zero;
      const valueWire = s?.wire ?? Wire.LengthDelimited;
      return (msg, r, wire) => {
        if (wire !== Wire.LengthDelimited) throw FALLBACK;
        const end = r.end(r.uint32());
        let k: string | undefined;
        let v: unknown;
        while (r.pos < end) {
          const tag = r.uint32();
          const no = tag >>> 3;
          if (no === 1 && (tag & 7) === key.wire) k = key.read(r) as string;
          else if (no === 2 && (tag & 7) === valueWire)
            v = valuePlan !== undefined ? readMessage(valuePlan, r) : s!.read(r);
          else throw FALLBACK;
        }
        if (r.pos !== end) throw FALLBACK;
        if (v === undefined) v = valuePlan !== undefined ? valuePlan.zero() : zero;
        if (k === "__proto__") throw FALLBACK; // an own key, not the prototype: fromBinary's way
        (msg[name] as Rec)[k ?? ""] = v;
      };
    }
  }
}

/** The message `fromBinary(desc, bytes)` gives, decoded by its plan where the plan covers it. */
export function plannedFromBinary<Desc extends DescMessage>(desc: Desc, bytes: Uint8Array): MessageShape<Desc> {
  const plan = planOf(desc);
  if (plan !== undefined) {
    try {
      const r = new Reader(bytes);
      const msg = plan.zero();
      readFields(plan, msg, r, bytes.length);
      return msg as MessageShape<Desc>;
    } catch (err) {
      if (err !== FALLBACK && !(err instanceof RangeError)) throw err;
    }
  }
  return fromBinary(desc, bytes);
}

/** Whether messages of desc are decoded by a plan (else always by fromBinary). */
export function decodesByPlan(desc: DescMessage): boolean {
  return planOf(desc) !== undefined;
}
