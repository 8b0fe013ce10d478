// The scope an RPC needs, read off its descriptor: the `scope` method option
// and, for requests whose meaning depends on a field (presign upload vs
// download), the `scope_when` rules.
import { getOption, hasOption, type DescMethod } from "@bufbuild/protobuf";
import { scope as scopeOption, scope_when } from "../../gen/resourcestore/type/v1/options_pb.js";
import { isScope, stricter, type Scope } from "./scopes.js";

/** Services we host but do not declare: health stays open like /healthz; reflection describes the API, so it reads. */
const FOREIGN: Readonly<Record<string, Scope | "open">> = {
  "grpc.health.v1.Health": "open",
  "grpc.reflection.v1.ServerReflection": "read",
  "grpc.reflection.v1alpha.ServerReflection": "read",
};

/** The declared base scope, "open", or undefined when the method declares none. */
export function declaredScope(method: DescMethod): Scope | "open" | undefined {
  return scopePlanOf(method).base;
}

/** A scope_when rule with its field resolved. */
interface ScopeRule {
  readonly localName: string;
  readonly equals: string;
  readonly scope: Scope;
}

/** What a method's options say, read once per method (reading extension options costs more than the rest of the check). */
interface ScopePlan {
  readonly base: Scope | "open" | undefined;
  readonly rules: readonly ScopeRule[];
}

const scopePlans = new WeakMap<DescMethod, ScopePlan>();

function scopePlanOf(method: DescMethod): ScopePlan {
  let plan = scopePlans.get(method);
  if (plan !== undefined) return plan;
  let base: Scope | "open" | undefined = FOREIGN[method.parent.typeName];
  if (hasOption(method, scopeOption)) {
    const s = getOption(method, scopeOption);
    base = isScope(s) ? s : undefined;
  }
  const rules: ScopeRule[] = [];
  for (const rule of hasOption(method, scope_when) ? getOption(method, scope_when) : []) {
    const field = method.input.fields.find((f) => f.name === rule.field);
    if (field === undefined || !isScope(rule.scope)) continue;
    rules.push({ localName: field.localName, equals: rule.equals.toLowerCase(), scope: rule.scope });
  }
  plan = { base, rules };
  scopePlans.set(method, plan);
  return plan;
}

/**
 * What this call needs. `message` is the request of a unary call (undefined
 * for streams, whose scope_when rules cannot apply before the first message).
 */
export function requiredScope(method: DescMethod, message: unknown): Scope | "open" | undefined {
  const { base, rules } = scopePlanOf(method);
  if (base === undefined || base === "open" || message === undefined) return base;
  let needed: Scope = base;
  for (const rule of rules) {
    const value = (message as Record<string, unknown>)[rule.localName];
    if (typeof value === "string" && value.trim().toLowerCase() === rule.equals) {
      needed = stricter(needed, rule.scope);
    }
  }
  return needed;
}
