// The v2 StorageService client over an in-memory router, as the REST gateway
// and the Connect listener will call the handlers.
import { createClient, createRouterTransport } from "@connectrpc/connect";
import type { Client } from "@connectrpc/connect";
import { StorageService } from "../../gen/resourcestore/v2/storage_service_pb.js";
import { createStorageService } from "../../src/rpc/index.js";
import type { StorageServiceDeps } from "../../src/rpc/index.js";
import { routerAs } from "../support/caller.js";

export type StorageClient = Client<typeof StorageService>;

/** `json` sends Connect JSON (as the REST gateway will) instead of binary. */
export function storageClient(deps: StorageServiceDeps, options: { json?: boolean } = {}): StorageClient {
  const transport = createRouterTransport(
    (router) => {
      router.service(StorageService, createStorageService(deps));
    },
    { transport: { useBinaryFormat: options.json !== true }, ...routerAs() },
  );
  return createClient(StorageService, transport);
}
