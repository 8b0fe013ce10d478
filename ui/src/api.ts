// The explorer's only way to the service: @connectrpc/connect-web clients
// built from the generated service descriptors (gen/), over Connect JSON on
// the page's own origin. An API call answered with 401 asks for a token
// (kept in sessionStorage, so it is gone with the tab) and is retried once.
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
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

export function setToken(token: string | null): void {
  if (token === null || token === "") sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, token);
}

/** Shows the token dialog; resolves with the token entered, or null when cancelled. */
let askToken: (reason: string) => Promise<string | null> = () => Promise.resolve(null);
export function onTokenNeeded(ask: (reason: string) => Promise<string | null>): void {
  askToken = ask;
}

let pendingAsk: Promise<string | null> | undefined;

const bearer: Interceptor = (next) => async (req) => {
  const token = currentToken();
  if (token !== null) req.header.set("authorization", `Bearer ${token}`);
  try {
    return await next(req);
  } catch (err) {
    const e = ConnectError.from(err);
    if (e.code !== Code.Unauthenticated) throw err;
    // One dialog for every call refused at the same moment.
    pendingAsk ??= askToken(e.rawMessage).finally(() => (pendingAsk = undefined));
    const entered = await pendingAsk;
    if (entered === null) throw err;
    setToken(entered);
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

export const api = {
  children: createClient(LineageV1, transport),
  lineage: createClient(LineageService, transport),
  resources: createClient(ResourceService, transport),
  query: createClient(QueryService, transport),
  schemas: createClient(SchemaService, transport),
  storage: createClient(StorageService, transport),
};

/** A message for the page: the Connect code and message, never a stack. */
export function describeError(err: unknown): string {
  const e = ConnectError.from(err);
  return `${Code[e.code] ?? "error"}: ${e.rawMessage}`;
}
