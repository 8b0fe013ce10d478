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
  if (hasOption(method, scopeOption)) {
    const s = getOption(method, scopeOption);
    return isScope(s) ? s : undefined;
  }
  return FOREIGN[method.parent.typeName];
}

/**
 * What this call needs. `message` is the request of a unary call (undefined
 * for streams, whose scope_when rules cannot apply before the first message).
 */
export function requiredScope(method: DescMethod, message: unknown): Scope | "open" | undefined {
  const base = declaredScope(method);
  if (base === undefined || base === "open" || message === undefined) return base;
  let needed: Scope = base;
  for (const rule of hasOption(method, scope_when) ? getOption(method, scope_when) : []) {
    const field = method.input.fields.find((f) => f.name === rule.field);
    if (field === undefined || !isScope(rule.scope)) continue;
    const value = (message as Record<string, unknown>)[field.localName];
    if (typeof value === "string" && value.trim().toLowerCase() === rule.equals.toLowerCase()) {
      needed = stricter(needed, rule.scope);
    }
  }
  return needed;
}
