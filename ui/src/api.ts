// The explorer's only way to the service: @connectrpc/connect-web clients
// built from the generated service descriptors (gen/), over Connect JSON on
// the page's own origin. An API call answered with 401 asks for a token,
// which is kept (in sessionStorage, so it is gone with the tab) only once
// WhoAmI accepts it; the call is then retried once.
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import type { WhoAmIResponse } from "../../gen/resourcestore/type/v1/identity_pb.js";
import { IdentityService } from "../../gen/resourcestore/v2/identity_service_pb.js";
import { StatsService } from "../../gen/resourcestore/v2/stats_service_pb.js";
import { LineageService as LineageV1 } from "../../gen/resourcestore/v1/lineage_service_pb.js";
import { QueryService } from "../../gen/resourcestore/v2/query_service_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { LineageService } from "../../gen/resourcestore/v2/lineage_service_pb.js";
import { SchemaService } from "../../gen/resourcestore/v2/schema_service_pb.js";
import { StorageService } from "../../gen/resourcestore/v2/storage_service_pb.js";

const TOKEN_KEY = "resource-store.token";

export function currentToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** Who the page is calling as (WhoAmI), once known; told to listeners on every change. */
let identity: WhoAmIResponse | undefined;
const identityListeners: ((me: WhoAmIResponse | undefined) => void)[] = [];
export function onIdentity(l: (me: WhoAmIResponse | undefined) => void): void {
  identityListeners.push(l);
}
/** Who the page calls as, once WhoAmI answered. */
export function identityNow(): WhoAmIResponse | undefined {
  return identity;
}
function setIdentity(me: WhoAmIResponse | undefined): void {
  identity = me;
  for (const l of identityListeners) l(me);
}

export function setToken(token: string | null): void {
  if (token === null || token === "") sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, token);
  if (token === null) setIdentity(undefined);
}

/** Shows the token dialog; resolves with the token entered, or null when cancelled. */
let askToken: (reason: string) => Promise<string | null> = () => Promise.resolve(null);
export function onTokenNeeded(ask: (reason: string) => Promise<string | null>): void {
  askToken = ask;
}

let pendingAsk: Promise<string | null> | undefined;
/** Cancelled: calls refused afterwards fail instead of asking again, until the reader signs in from the header. */
let declined = false;

/**
 * Asks for a token until WhoAmI accepts one (or the reader cancels: null).
 * A refused token is never kept, so one typo does not break every panel.
 */
export function signIn(reason: string): Promise<string | null> {
  pendingAsk ??= (async () => {
    let why = reason;
    for (;;) {
      const entered = await askToken(why);
      declined = entered === null;
      if (entered === null) return null;
      try {
        const me = await whoAmIClient.whoAmI({}, { headers: { authorization: `Bearer ${entered}` } });
        setToken(entered);
        setIdentity(me);
        return entered;
      } catch (err) {
        const e = ConnectError.from(err);
        why = e.code === Code.Unauthenticated ? `That token was refused: ${e.rawMessage}` : describeError(err);
      }
    }
  })().finally(() => (pendingAsk = undefined));
  return pendingAsk;
}

const bearer: Interceptor = (next) => async (req) => {
  if (req.header.has("authorization")) return await next(req);
  const token = currentToken();
  if (token !== null) req.header.set("authorization", `Bearer ${token}`);
  try {
    return await next(req);
  } catch (err) {
    const e = ConnectError.from(err);
    if (e.code !== Code.Unauthenticated) throw err;
    if (declined) throw err;
    // One dialog for every call refused at the same moment.
    const entered = await signIn(e.rawMessage);
    if (entered === null) throw err;
    req.header.set("authorization", `Bearer ${entered}`);
    return await next(req);
  }
};

export const transport = createConnectTransport({
  baseUrl: location.origin,
  useBinaryFormat: false,
  interceptors: [bearer],
  jsonOptions: { ignoreUnknownFields: true },
});

const whoAmIClient = createClient(IdentityService, transport);

/**
 * Who the page calls as. Every panel waits for this before its first call,
 * so a fresh load with authentication on is refused once (this call), not
 * once per panel.
 */
export const ready: Promise<WhoAmIResponse | undefined> = whoAmIClient
  .whoAmI({})
  .then((me) => {
    setIdentity(me);
    return me;
  })
  .catch(() => identity);

export const api = {
  stats: createClient(StatsService, transport),
  children: createClient(LineageV1, transport),
  lineage: createClient(LineageService, transport),
  resources: createClient(ResourceService, transport),
  query: createClient(QueryService, transport),
  schemas: createClient(SchemaService, transport),
  storage: createClient(StorageService, transport),
};

/** A message for the page: what went wrong in words, never a stack. */
export function describeError(err: unknown): string {
  const e = ConnectError.from(err);
  // fetch() itself failed: no answer came back at all.
  if (e.code === Code.Unknown && /fetch|network|load failed/i.test(e.rawMessage))
    return "The service cannot be reached (it may be down, or the network is out). Try again later.";
  if (e.code === Code.Unavailable) return `The service is unavailable for now: ${e.rawMessage}`;
  if (e.code === Code.Unauthenticated) return `Not signed in: ${e.rawMessage}`;
  if (e.code === Code.PermissionDenied) return `Your token may not do this: ${e.rawMessage}`;
  return `${Code[e.code] ?? "error"}: ${e.rawMessage}`;
}
