// QueryService and ResourceService through an in-memory router transport (v2 descriptors), per backend.
import { createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { QueryService } from "../../gen/resourcestore/v2/query_service_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { createQueryService, type QueryServiceDeps, createResourceService } from "../../src/rpc/index.js";
import type { Backend } from "../store/backends.js";
import { routerAs } from "../support/caller.js";

export interface Clients {
  readonly query: Client<typeof QueryService>;
  readonly resources: Client<typeof ResourceService>;
}

export function clients(backend: Backend, extra: Partial<QueryServiceDeps> = {}): Clients {
  const transport = createRouterTransport((router) => {
    router.service(QueryService, createQueryService({ db: backend.db, ...extra }));
    router.service(
      ResourceService,
      createResourceService({ store: backend.store, limits: { maxBatchItems: 10_000, maxQueryLimit: 10_000 } }),
    );
  }, routerAs());
  return { query: createClient(QueryService, transport), resources: createClient(ResourceService, transport) };
}
