// The auth interceptor: in the one interceptor list that serves gRPC,
// gRPC-Web, Connect and (through the in-process router transport) REST, so
// every protocol is checked the same way. Unauthenticated calls get 401,
// calls without the scope 403; a method that declares no scope is refused,
// so a new RPC is never open by omission.
import type { Interceptor } from "@connectrpc/connect";
import { internal, permissionDenied } from "../errors.js";
import type { Authenticator, Principal } from "./authenticator.js";
import { requiredScope } from "./method-scope.js";
import { grants } from "./scopes.js";

export function createAuthInterceptor(auth: Authenticator): Interceptor {
  return (next) => async (req) => {
    const needed = requiredScope(req.method, req.stream ? undefined : req.message);
    if (needed === undefined) {
      const err = internal();
      (err as { cause: unknown }).cause = new Error(`${req.method.parent.typeName}.${req.method.name} declares no scope`);
      throw err;
    }
    if (needed === "open" || !auth.enabled) return next(req);
    const principal: Principal = await auth.authenticate(req.header.get("authorization"));
    if (!grants(principal.scopes, needed)) {
      throw permissionDenied(`this operation needs the "${needed}" scope`);
    }
    return next(req);
  };
}
