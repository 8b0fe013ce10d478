// The auth interceptor: in the one interceptor list that serves gRPC,
// gRPC-Web, Connect and (through the in-process router transport) REST, so
// every protocol is checked the same way. Unauthenticated calls get 401,
// calls without the scope 403; a method that declares no scope is refused,
// so a new RPC is never open by omission.
import type { DescMethod } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";
import { internal, permissionDenied } from "../errors.js";
import type { Authenticator, Principal } from "./authenticator.js";
import { requiredScope } from "./method-scope.js";
import { grants } from "./scopes.js";

export function createAuthInterceptor(auth: Authenticator): Interceptor {
  return (next) => async (req) => {
    const check = checkScope(auth, req.method, req.stream ? undefined : req.message, req.header.get("authorization"));
    if (check !== undefined) await check;
    return next(req);
  };
}

/**
 * Throws unless the credentials may call the method (what the interceptor
 * checks before every call). Answers at once (undefined, or a throw) when no
 * credentials need checking: an open operation, or authentication off.
 * Otherwise the promise of the check.
 */
export function checkScope(auth: Authenticator, method: DescMethod, message: Parameters<typeof requiredScope>[1], authorization: string | null): Promise<void> | undefined {
  const needed = requiredScope(method, message);
  if (needed === undefined) {
    throw internal(new Error(`${method.parent.typeName}.${method.name} declares no scope`));
  }
  if (needed === "open" || !auth.enabled) return undefined;
  return auth.authenticate(authorization).then((principal: Principal) => {
    if (!grants(principal.scopes, needed)) {
      throw permissionDenied(`this operation needs the "${needed}" scope`);
    }
  });
}
