// Services built without the app's pipeline (in-memory router transports)
// still need a caller: handlers read it with callerOf and fail without one.
import type { Interceptor } from "@connectrpc/connect";
import { LOCAL_CALLER, type Caller, type Grants } from "../../src/access/index.js";
import { callerKey } from "../../src/auth/index.js";

/** An interceptor that makes every call come from `caller` (as the auth interceptor would). */
export function callAs(caller: Caller = LOCAL_CALLER): Interceptor {
  return (next) => (req) => {
    req.contextValues.set(callerKey, caller);
    return next(req);
  };
}

/** Router transport options with callAs(caller) as their one interceptor. */
export function routerAs(caller: Caller = LOCAL_CALLER): { router: { interceptors: Interceptor[] } } {
  return { router: { interceptors: [callAs(caller)] } };
}

/** A caller with these grants (writes need an actor as well as grants). */
export function callerWith(grants: Grants, actor = "test"): Caller {
  return { actor, grants };
}
