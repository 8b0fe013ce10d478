// What the planned encoder (planned-binary.ts) and decoder
// (planned-from-binary.ts) share: the walk that decides whether a message
// type can have a plan, and the cache of plans by type. Each codec says what
// it covers by a test of its own on every reachable message and field; the
// walk itself holds what both exclude: message types protobuf-es keeps as
// plain values in fields (wrappers unboxed, google.protobuf.Struct as a JSON
// object), groups (delimited encoding) and maps whose key is not a string.
import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { isWrapperDesc } from "@bufbuild/protobuf/wkt";

/** One codec's coverage, beyond the shared rules. */
export interface Coverage {
  /** Whether a scalar of this type (a field's, a list element's or a map value's) is planned. */
  readonly scalar: (type: ScalarType) => boolean;
  /** A further test of each reachable message type (all pass when absent). */
  readonly message?: (desc: DescMessage) => boolean;
  /** A further test of each field of a reachable message type (all pass when absent). */
  readonly field?: (field: DescField) => boolean;
}

/** Whether every field reachable from desc is covered (cycles allowed). */
function plannable(desc: DescMessage, covers: Coverage, seen = new Set<DescMessage>()): boolean {
  if (seen.has(desc)) return true;
  seen.add(desc);
  if (isWrapperDesc(desc) || desc.typeName === "google.protobuf.Struct") return false;
  if (covers.message !== undefined && !covers.message(desc)) return false;
  for (const f of desc.fields) {
    if (covers.field !== undefined && !covers.field(f)) return false;
    switch (f.fieldKind) {
      case "scalar":
        if (!covers.scalar(f.scalar)) return false;
        break;
      case "enum":
        break;
      case "message":
        if (f.delimitedEncoding || !plannable(f.message, covers, seen)) return false;
        break;
      case "list":
        if (f.listKind === "scalar" && !covers.scalar(f.scalar)) return false;
        if (f.listKind === "message" && (f.delimitedEncoding || !plannable(f.message, covers, seen))) return false;
        break;
      case "map":
        if (f.mapKey !== ScalarType.STRING) return false;
        if (f.mapKind === "scalar" && !covers.scalar(f.scalar)) return false;
        if (f.mapKind === "message" && !plannable(f.message, covers, seen)) return false;
        break;
    }
  }
  return true;
}

export interface Plans<P> {
  /** The plan of a message type, or undefined when the codec does not cover it (decided once per type). */
  readonly planOf: (desc: DescMessage) => P | undefined;
  /** The plan of a type reached from a covered one: made when first asked for, recursive types included. */
  readonly build: (desc: DescMessage) => P;
}

/**
 * Plans by message type. `make` gives a type's plan with nothing in it yet;
 * it is kept before `fill` runs, so a recursive type finds its own plan.
 */
export function planCache<P>(
  covers: Coverage,
  make: (desc: DescMessage) => P,
  fill: (desc: DescMessage, plan: P) => void,
): Plans<P> {
  const plans = new Map<DescMessage, P | null>();
  const build = (desc: DescMessage): P => {
    const existing = plans.get(desc);
    if (existing) return existing;
    const plan = make(desc);
    plans.set(desc, plan);
    fill(desc, plan);
    return plan;
  };
  return {
    planOf: (desc) => {
      const known = plans.get(desc);
      if (known !== undefined) return known ?? undefined;
      if (!plannable(desc, covers)) {
        plans.set(desc, null);
        return undefined;
      }
      return build(desc);
    },
    build,
  };
}
