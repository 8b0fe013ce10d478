// Protobuf binary encoding by a plan per message type, read once from the
// descriptors, writing the same bytes as protobuf-es's reflective
// `toBinary` (field number order, oneof members in that order, packed
// repeated scalars, map entries with key and value always written, unknown
// fields last). Two passes: the first sizes every nested message and string
// (kept in one array, in visiting order), the second writes into one buffer
// of exactly that size, strings straight from UTF-16 (no TextEncoder copy
// and no fork/join of nested writers). toBinary spent most of a read of 100
// resources in encodeUtf8 and fork/join (docs/benchmarks/read.md, "the read path").
//
// Only what the planned kinds cover is planned: a message type that can
// reach a group (delimited encoding), a map whose key is not a string, a
// scalar type other than string, bool, double, int32, int64, uint32 and
// enums, or a message protobuf-es keeps as a plain value in a field
// (wrappers, google.protobuf.Struct), is encoded by toBinary itself; so is any value the plan does not
// expect (an int64 that is not a bigint, an int32 out of range, ...), so
// toBinary raises its own error for it. test/protobuf/planned-binary.test.ts
// compares both byte for byte.
import { create, ScalarType, toBinary, type DescField, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import type { Interceptor } from "@connectrpc/connect";
import { planCache, type Coverage } from "./plans.js";

type Rec = Record<string, unknown>;

/** Thrown by a plan for a value it does not cover: the message goes to toBinary instead. Made once, thrown as is. */
const FALLBACK = new Error("not covered by the plan");

const enum Wire {
  Varint = 0,
  Bit64 = 1,
  LengthDelimited = 2,
}

class Writer {
  pos = 0;
  li = 0;
  constructor(
    readonly buf: Buffer,
    readonly lens: readonly number[],
  ) {}
  bytes(b: readonly number[]): void {
    for (let i = 0; i < b.length; i++) this.buf[this.pos++] = b[i]!;
  }
  /** An unsigned 32-bit varint. */
  varint(n: number): void {
    while (n > 0x7f) {
      this.buf[this.pos++] = (n & 0x7f) | 0x80;
      n >>>= 7;
    }
    this.buf[this.pos++] = n;
  }
  /** An int32 as protobuf writes it: negative values as 10-byte two's complement varints. */
  int32(n: number): void {
    if (n >= 0) this.varint(n);
    else this.uint64(BigInt.asUintN(64, BigInt(n)));
  }
  uint64(n: bigint): void {
    while (n > 0x7fn) {
      this.buf[this.pos++] = Number(n & 0x7fn) | 0x80;
      n >>= 7n;
    }
    this.buf[this.pos++] = Number(n);
  }
  double(d: number): void {
    this.buf.writeDoubleLE(d, this.pos);
    this.pos += 8;
  }
  /** A string whose UTF-8 length the size pass recorded. */
  string(s: string): void {
    const len = this.lens[this.li++]!;
    this.varint(len);
    if (len === s.length && len <= SHORT_STRING) {
      // ASCII (as many bytes as UTF-16 units), short: by hand, no native call.
      const b = this.buf;
      const at = this.pos;
      for (let i = 0; i < len; i++) b[at + i] = s.charCodeAt(i);
    } else if (len > 0) this.buf.write(s, this.pos, len, "utf8");
    this.pos += len;
  }
  /** The length the size pass recorded for the next nested message or packed list. */
  nextLength(): number {
    return this.lens[this.li++]!;
  }
}

/**
 * Strings up to this many UTF-16 units are measured and, when ASCII, written
 * by hand: Buffer.byteLength and Buffer.write are a native call each, and a
 * page of 100 versions has about a thousand short strings (identifiers,
 * stamps, actors, kinds), which spent a third of the encoding in those calls.
 */
const SHORT_STRING = 64;

/** The UTF-8 length of s (of a lone surrogate: 3, U+FFFD, as Buffer writes it). */
function utf8Length(s: string): number {
  const n = s.length;
  if (n > SHORT_STRING) return Buffer.byteLength(s, "utf8");
  for (let i = 0; i < n; i++) if (s.charCodeAt(i) >= 0x80) return Buffer.byteLength(s, "utf8");
  return n;
}

function varintSize(n: number): number {
  return n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5;
}

function uint64Size(n: bigint): number {
  let size = 1;
  while (n > 0x7fn) {
    n >>= 7n;
    size++;
  }
  return size;
}

function tagBytes(no: number, wire: number): number[] {
  const out: number[] = [];
  let n = ((no << 3) | wire) >>> 0;
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return out;
}

/** One scalar kind: its wire type, a zero test (implicit presence), its size and how to write it. */
interface ScalarPlan {
  readonly wire: Wire;
  readonly isZero: (v: unknown) => boolean;
  readonly size: (v: unknown, lens: number[]) => number;
  readonly write: (v: unknown, w: Writer) => void;
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

function int32Of(v: unknown): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v > 0x7fffffff || v < -0x80000000) throw FALLBACK;
  return v;
}

const SCALARS: Partial<Record<ScalarType, ScalarPlan>> = {
  [ScalarType.STRING]: {
    wire: Wire.LengthDelimited,
    isZero: (v) => v === "",
    size(v, lens) {
      if (typeof v !== "string") throw FALLBACK;
      const len = utf8Length(v);
      lens.push(len);
      return varintSize(len) + len;
    },
    write: (v, w) => w.string(v as string),
  },
  [ScalarType.BOOL]: {
    wire: Wire.Varint,
    isZero: (v) => v === false,
    size: () => 1,
    write: (v, w) => void (w.buf[w.pos++] = v ? 1 : 0),
  },
  [ScalarType.DOUBLE]: {
    wire: Wire.Bit64,
    isZero: (v) => Object.is(v, 0),
    size(v) {
      if (typeof v !== "number") throw FALLBACK;
      return 8;
    },
    write: (v, w) => w.double(v as number),
  },
  [ScalarType.INT32]: {
    wire: Wire.Varint,
    isZero: (v) => v == 0, // eslint-disable-line eqeqeq -- toBinary's own test (0, 0n and "0")
    size(v) {
      const n = int32Of(v);
      return n >= 0 ? varintSize(n) : 10;
    },
    write: (v, w) => w.int32(v as number),
  },
  [ScalarType.UINT32]: {
    wire: Wire.Varint,
    isZero: (v) => v == 0, // eslint-disable-line eqeqeq
    size(v) {
      if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > 0xffffffff) throw FALLBACK;
      return varintSize(v);
    },
    write: (v, w) => w.varint(v as number),
  },
  [ScalarType.INT64]: {
    wire: Wire.Varint,
    isZero: (v) => v == 0, // eslint-disable-line eqeqeq
    size(v) {
      if (typeof v !== "bigint" || v < INT64_MIN || v > INT64_MAX) throw FALLBACK;
      return uint64Size(BigInt.asUintN(64, v));
    },
    write: (v, w) => w.uint64(BigInt.asUintN(64, v as bigint)),
  },
};

/** A field's share of its message: size (recording lengths) and write, both skipping an unset field. */
interface FieldPlan {
  size(msg: Rec, lens: number[]): number;
  write(msg: Rec, w: Writer): void;
}

interface MessagePlan {
  fields: FieldPlan[];
}

const ENCODER: Coverage = { scalar: (t) => SCALARS[t] !== undefined };

const { planOf, build } = planCache<MessagePlan>(
  ENCODER,
  () => ({ fields: [] }),
  (desc, plan) => {
    const sorted = [...desc.fields].sort((a, b) => a.number - b.number);
    plan.fields = sorted.map(fieldPlan);
  },
);

function scalarOf(f: DescField & { fieldKind: "scalar" | "enum" }): ScalarPlan {
  return f.fieldKind === "enum" ? SCALARS[ScalarType.INT32]! : SCALARS[f.scalar]!;
}

/** A nested message with its tag and length. */
function messageSize(plan: MessagePlan, tagLen: number, v: unknown, lens: number[]): number {
  if (typeof v !== "object" || v === null) throw FALLBACK;
  const at = lens.length;
  lens.push(0);
  const inner = sizeOf(plan, v as Rec, lens);
  lens[at] = inner;
  return tagLen + varintSize(inner) + inner;
}

function messageWrite(plan: MessagePlan, tag: readonly number[], v: unknown, w: Writer): void {
  w.bytes(tag);
  w.varint(w.nextLength());
  writeOf(plan, v as Rec, w);
}

function fieldPlan(f: DescField): FieldPlan {
  const name = f.localName;
  // Whether the field is set, as protobuf-es's reflection decides it.
  let isSet: (msg: Rec) => boolean;
  let value: (msg: Rec) => unknown = (msg) => msg[name];
  if (f.oneof !== undefined) {
    const group = f.oneof.localName;
    isSet = (msg) => (msg[group] as { case?: string } | undefined)?.case === name;
    value = (msg) => (msg[group] as { value: unknown }).value;
  } else if (f.fieldKind === "list") {
    isSet = (msg) => (msg[name] as unknown[]).length > 0;
  } else if (f.fieldKind === "map") {
    isSet = (msg) => Object.keys(msg[name] as object).length > 0;
  } else if (f.fieldKind === "message" || f.presence !== FeatureSet_FieldPresence.IMPLICIT) {
    isSet = (msg) => msg[name] !== undefined && Object.prototype.hasOwnProperty.call(msg, name);
  } else {
    const zero = scalarOf(f).isZero;
    const zeroEnum = f.fieldKind === "enum" ? f.enum.values[0]!.number : undefined;
    isSet = zeroEnum !== undefined ? (msg) => msg[name] !== zeroEnum : (msg) => !zero(msg[name]);
  }

  switch (f.fieldKind) {
    case "scalar":
    case "enum": {
      const s = scalarOf(f);
      const tag = tagBytes(f.number, s.wire);
      if (f.oneof === undefined && f.presence === FeatureSet_FieldPresence.IMPLICIT) {
        // The common case, read once per pass: unset is the zero value (an enum's first).
        const zeroEnum = f.fieldKind === "enum" ? f.enum.values[0]!.number : undefined;
        const isZero = zeroEnum !== undefined ? (v: unknown) => v === zeroEnum : s.isZero;
        return {
          size(msg, lens) {
            const v = msg[name];
            return isZero(v) ? 0 : tag.length + s.size(v, lens);
          },
          write(msg, w) {
            const v = msg[name];
            if (isZero(v)) return;
            w.bytes(tag);
            s.write(v, w);
          },
        };
      }
      return {
        size: (msg, lens) => (isSet(msg) ? tag.length + s.size(value(msg), lens) : 0),
        write(msg, w) {
          if (!isSet(msg)) return;
          w.bytes(tag);
          s.write(value(msg), w);
        },
      };
    }
    case "message": {
      const plan = build(f.message);
      const tag = tagBytes(f.number, Wire.LengthDelimited);
      return {
        size: (msg, lens) => (isSet(msg) ? messageSize(plan, tag.length, value(msg), lens) : 0),
        write(msg, w) {
          if (isSet(msg)) messageWrite(plan, tag, value(msg), w);
        },
      };
    }
    case "list": {
      if (f.listKind === "message") {
        const plan = build(f.message);
        const tag = tagBytes(f.number, Wire.LengthDelimited);
        return {
          size(msg, lens) {
            let n = 0;
            for (const item of msg[name] as unknown[]) n += messageSize(plan, tag.length, item, lens);
            return n;
          },
          write(msg, w) {
            for (const item of msg[name] as unknown[]) messageWrite(plan, tag, item, w);
          },
        };
      }
      const s = f.listKind === "enum" ? SCALARS[ScalarType.INT32]! : SCALARS[f.scalar]!;
      if (f.packed) {
        const tag = tagBytes(f.number, Wire.LengthDelimited);
        return {
          size(msg, lens) {
            const list = msg[name] as unknown[];
            if (list.length === 0) return 0;
            const at = lens.length;
            lens.push(0);
            let inner = 0;
            for (const item of list) inner += s.size(item, lens);
            lens[at] = inner;
            return tag.length + varintSize(inner) + inner;
          },
          write(msg, w) {
            const list = msg[name] as unknown[];
            if (list.length === 0) return;
            w.bytes(tag);
            w.varint(w.nextLength());
            for (const item of list) s.write(item, w);
          },
        };
      }
      const tag = tagBytes(f.number, s.wire);
      return {
        size(msg, lens) {
          let n = 0;
          for (const item of msg[name] as unknown[]) n += tag.length + s.size(item, lens);
          return n;
        },
        write(msg, w) {
          for (const item of msg[name] as unknown[]) {
            w.bytes(tag);
            s.write(item, w);
          }
        },
      };
    }
    case "map": {
      const key = SCALARS[ScalarType.STRING]!;
      const tag = tagBytes(f.number, Wire.LengthDelimited);
      const keyTag = tagBytes(1, key.wire);
      const valuePlan = f.mapKind === "message" ? build(f.message) : undefined;
      const s =
        f.mapKind === "enum" ? SCALARS[ScalarType.INT32]! : f.mapKind === "scalar" ? SCALARS[f.scalar]! : undefined;
      const valueTag = tagBytes(2, s?.wire ?? Wire.LengthDelimited);
      return {
        size(msg, lens) {
          const map = msg[name] as Rec;
          let n = 0;
          for (const k of Object.keys(map)) {
            const at = lens.length;
            lens.push(0);
            let inner = keyTag.length + key.size(k, lens);
            inner +=
              valuePlan !== undefined
                ? messageSize(valuePlan, valueTag.length, map[k], lens)
                : valueTag.length + s!.size(map[k], lens);
            lens[at] = inner;
            n += tag.length + varintSize(inner) + inner;
          }
          return n;
        },
        write(msg, w) {
          const map = msg[name] as Rec;
          for (const k of Object.keys(map)) {
            w.bytes(tag);
            w.varint(w.nextLength());
            w.bytes(keyTag);
            key.write(k, w);
            if (valuePlan !== undefined) messageWrite(valuePlan, valueTag, map[k], w);
            else {
              w.bytes(valueTag);
              s!.write(map[k], w);
            }
          }
        },
      };
    }
  }
}

interface Unknown {
  readonly no: number;
  readonly wireType: number;
  readonly data: Uint8Array;
}

function sizeOf(plan: MessagePlan, msg: Rec, lens: number[]): number {
  let n = 0;
  for (const f of plan.fields) n += f.size(msg, lens);
  const unknown = msg.$unknown as readonly Unknown[] | undefined;
  if (unknown !== undefined) for (const u of unknown) n += tagBytes(u.no, u.wireType).length + u.data.byteLength;
  return n;
}

function writeOf(plan: MessagePlan, msg: Rec, w: Writer): void {
  for (const f of plan.fields) f.write(msg, w);
  const unknown = msg.$unknown as readonly Unknown[] | undefined;
  if (unknown === undefined) return;
  for (const u of unknown) {
    w.bytes(tagBytes(u.no, u.wireType));
    w.buf.set(u.data, w.pos);
    w.pos += u.data.byteLength;
  }
}

/** The message's protobuf binary encoding: the same bytes as `toBinary(desc, message)`. */
export function plannedToBinary<Desc extends DescMessage>(desc: Desc, message: MessageShape<Desc>): Uint8Array {
  const plan = planOf(desc);
  if (plan === undefined) return toBinary(desc, message);
  try {
    const lens: number[] = [];
    const size = sizeOf(plan, message, lens);
    const w = new Writer(Buffer.allocUnsafe(size), lens);
    writeOf(plan, message, w);
    if (w.pos !== size) throw new Error(`planned encoding of ${desc.typeName} wrote ${w.pos} of ${size} bytes`);
    return w.buf;
  } catch (err) {
    if (err === FALLBACK) return toBinary(desc, message);
    throw err;
  }
}

/**
 * A message of the same type whose binary encoding (by toBinary, as connect
 * serializes it) is `bytes`: no fields, one unknown field holding
 * everything after the first tag (toBinary writes an unknown field as its
 * tag, then its bytes as kept). Only for a wire that is protobuf binary: its
 * JSON would be empty.
 */
export function encodedMessage<Desc extends DescMessage>(desc: Desc, bytes: Uint8Array): MessageShape<Desc> {
  const shell = create(desc) as MessageShape<Desc> & { $unknown?: Unknown[] };
  if (bytes.byteLength === 0) return shell;
  let tag = 0;
  let shift = 0;
  let i = 0;
  for (;;) {
    const b = bytes[i++]!;
    tag |= (b & 0x7f) << shift;
    if (b < 0x80) break;
    shift += 7;
  }
  tag >>>= 0;
  shell.$unknown = [{ no: tag >>> 3, wireType: tag & 7, data: bytes.subarray(i) }];
  return shell;
}

/** Content types whose messages are protobuf binary (gRPC, gRPC-Web, Connect). */
const BINARY_CONTENT_TYPE = /^application\/(?:grpc(?:-web)?(?:\+proto)?|proto|connect\+proto)\s*(?:;|$)/i;

/**
 * Encodes the unary answers of the given output types by their plan when
 * the call's wire is protobuf binary, and hands connect the bytes (as
 * encodedMessage) to write as they are. Must be the outermost interceptor:
 * every other one sees the real message.
 */
export function createPlannedBinaryInterceptor(outputs: readonly DescMessage[]): Interceptor {
  const planned = new Set(outputs.map((d) => d.typeName));
  return (next) => async (req) => {
    const res = await next(req);
    if (
      res.stream ||
      !planned.has(res.method.output.typeName) ||
      !BINARY_CONTENT_TYPE.test(req.header.get("content-type") ?? "")
    )
      return res;
    return { ...res, message: encodedMessage(res.method.output, plannedToBinary(res.method.output, res.message)) };
  };
}

/**
 * The client's side of the same: every unary request is encoded by its plan
 * and the transport is handed the bytes (as encodedMessage). Only for a
 * transport whose wire is protobuf binary (gRPC, gRPC-Web), and it must be
 * the innermost interceptor: every other one sees the real message. A batch
 * create of 1,000 resources: 11 ms in toBinary, 2.3 ms by its plan.
 */
export function createPlannedRequestInterceptor(): Interceptor {
  return (next) => (req) => {
    if (req.stream) return next(req);
    return next({ ...req, message: encodedMessage(req.method.input, plannedToBinary(req.method.input, req.message)) });
  };
}
