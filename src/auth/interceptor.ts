// The auth interceptor: in the one interceptor list that serves gRPC,
// gRPC-Web, Connect and REST, so every protocol is checked the same way.
// Unauthenticated calls get 401, calls without the scope 403; a method that
// declares no scope is refused, so a new RPC is never open by omission.
// It is also where a caller becomes a Caller (actor and grants,
// docs/contract/18-access.md): the one place, for every call.
import type { DescMethod } from "@bufbuild/protobuf";
import { createContextKey, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import { LOCAL_CALLER, type Caller } from "../access/index.js";
import { internal, permissionDenied } from "../errors.js";
import type { Authenticator, Principal } from "./authenticator.js";
import { requiredScope } from "./method-scope.js";
import { grants, type Scope } from "./scopes.js";

/**
 * The call's caller, set by the auth interceptor before any handler runs.
 * No default: a handler that asks for the caller of a call the interceptor
 * did not see fails (callerOf), rather than reading with someone's grants.
 */
export const callerKey = createContextKey<Caller | undefined>(undefined, {
  description: "the caller: actor and grants",
});

/** The caller of this call; throws internal when the pipeline set none (a handler reached around the interceptors). */
export function callerOf(ctx: Pick<HandlerContext, "values">): Caller {
  const caller = ctx.values.get(callerKey);
  if (caller === undefined)
    throw internal(new Error("no caller: the handler was reached without the auth interceptor"));
  return caller;
}

/**
 * Who the call's credentials name, set by the auth interceptor as soon as
 * they authenticate, before the method's scope is checked: so a call its
 * scope then refuses still has an actor (the read audit names it, issue 41;
 * docs/contract/19-audit-history.md). Unset when authentication itself
 * failed. Not the caller: nothing may read with it (that is callerOf).
 */
export const actorKey = createContextKey<string | undefined>(undefined, {
  description: "the actor the credentials named, allowed or not",
});

/**
 * A caller the process itself names for a call it makes in process (the
 * DICOM receiver files as `dicom:<calling AE>`, src/dicom/receiver.ts).
 * Context values never come from the wire, so no request can set it.
 */
export const trustedCallerKey = createContextKey<Caller | undefined>(undefined, {
  description: "a caller set by the process for its own in-process calls",
});

/**
 * What the call's credentials hold: the scopes they grant (a higher scope
 * grants the lower ones; all three when no credentials were checked:
 * authentication off), and whether they were
 * checked. What WhoAmI answers (docs/contract/12-authentication.md);
 * nothing may decide access with it.
 */
export const credentialsKey = createContextKey<{ readonly scopes: readonly Scope[]; readonly checked: boolean }>(
  { scopes: [], checked: false },
  { description: "the scopes the credentials hold" },
);

/**
 * Credentials already authenticated for this call's request (the front
 * door checks them before any body is read, src/http/arrival.ts): the
 * Authorization header they were read from, and the principal it names. The
 * interceptor takes the principal from here, when the header is the same,
 * and checks the method's scope only: one authentication a call (with OIDC,
 * one JWT verification). Context values never come from the wire.
 */
export interface Authenticated {
  readonly authorization: string | null;
  readonly principal: Principal;
}
export const authenticatedKey = createContextKey<Authenticated | undefined>(undefined, {
  description: "the credentials the front door authenticated",
});

const ALL_SCOPES: readonly Scope[] = ["read", "write", "admin"];

function callerFrom(principal: Principal): Caller {
  return principal.expiresAt === undefined
    ? { actor: principal.actor, grants: principal.grants }
    : { actor: principal.actor, grants: principal.grants, expiresAt: principal.expiresAt };
}

export function createAuthInterceptor(auth: Authenticator): Interceptor {
  return (next) => async (req) => {
    const trusted = req.contextValues.get(trustedCallerKey);
    if (trusted !== undefined) {
      req.contextValues.set(actorKey, trusted.actor).set(callerKey, trusted);
      return next(req);
    }
    const check = authorize(
      auth,
      req.method,
      req.stream ? undefined : req.message,
      req.header.get("authorization"),
      req.contextValues.get(authenticatedKey),
      (principal) => req.contextValues.set(actorKey, principal.actor),
    );
    const principal = check === undefined ? undefined : await check;
    const caller = principal === undefined ? LOCAL_CALLER : callerFrom(principal);
    const credentials =
      principal === undefined
        ? { scopes: ALL_SCOPES, checked: false }
        : { scopes: ALL_SCOPES.filter((s) => grants(principal.scopes, s)), checked: true };
    req.contextValues.set(actorKey, caller.actor).set(callerKey, caller).set(credentialsKey, credentials);
    return next(req);
  };
}

/**
 * The principal who may call the method, or undefined when no credentials
 * need checking (an open operation, or authentication off). Throws (or
 * rejects) unless the credentials may call it. `atDoor`: the principal the
 * front door authenticated the same header as, if it did (then nothing is
 * authenticated again). `authenticated` is told of the principal once the
 * credentials are valid, before the scope is checked.
 */
function authorize(
  auth: Authenticator,
  method: DescMethod,
  message: Parameters<typeof requiredScope>[1],
  authorization: string | null,
  atDoor: Authenticated | undefined,
  authenticated?: (principal: Principal) => void,
): Promise<Principal> | undefined {
  const needed = requiredScope(method, message);
  if (needed === undefined) {
    throw internal(new Error(`${method.parent.typeName}.${method.name} declares no scope`));
  }
  if (needed === "open" || !auth.enabled) return undefined;
  const allowed = (principal: Principal): Principal => {
    authenticated?.(principal);
    if (!grants(principal.scopes, needed)) {
      throw permissionDenied(`this operation needs the "${needed}" scope`);
    }
    return principal;
  };
  const principal =
    atDoor !== undefined && atDoor.authorization === authorization
      ? Promise.resolve(atDoor.principal)
      : auth.authenticate(authorization);
  return principal.then(allowed);
}

/**
 * Throws unless the credentials may call the method (what the interceptor
 * checks before every call). Answers at once (undefined, or a throw) when no
 * credentials need checking: an open operation, or authentication off.
 * Otherwise the promise of the check.
 */
export function checkScope(
  auth: Authenticator,
  method: DescMethod,
  message: Parameters<typeof requiredScope>[1],
  authorization: string | null,
  atDoor: Authenticated | undefined,
): Promise<void> | undefined {
  const check = authorize(auth, method, message, authorization, atDoor);
  return check === undefined ? undefined : check.then(() => undefined);
}
