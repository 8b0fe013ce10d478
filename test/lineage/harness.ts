// Every service of this area behind an in-memory router transport, once per
// backend (see test/store/backends.ts), with clients for both revisions.
import { createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { beforeAll } from "vitest";
import * as v1Admin from "../../gen/resourcestore/v1/admin_service_pb.js";
import * as v1Artefact from "../../gen/resourcestore/v1/artefact_service_pb.js";
import * as v1Lineage from "../../gen/resourcestore/v1/lineage_service_pb.js";
import * as v1Registry from "../../gen/resourcestore/v1/registry_service_pb.js";
import * as v1Resource from "../../gen/resourcestore/v1/resource_service_pb.js";
import * as v1Stats from "../../gen/resourcestore/v1/stats_service_pb.js";
import * as v2Lineage from "../../gen/resourcestore/v2/lineage_service_pb.js";
import * as v2Registry from "../../gen/resourcestore/v2/registry_service_pb.js";
import * as v2Resource from "../../gen/resourcestore/v2/resource_service_pb.js";
import * as v2Stats from "../../gen/resourcestore/v2/stats_service_pb.js";
import {
  createAdminService,
  createArtefactService,
  createLineageService,
  createRegistryService,
  createResourceService,
  createStatsService,
} from "../../src/rpc/index.js";
import { createRegistry, loadRegistryKeys } from "../../src/store/index.js";
import { describeBackends, type Backend } from "../store/backends.js";
import { TEST_REGISTRY_SECRET } from "../support/registry-key.js";
import { routerAs } from "../support/caller.js";

export interface Services {
  readonly backend: Backend;
  readonly resources: Client<typeof v2Resource.ResourceService>;
  readonly lineage: Client<typeof v1Lineage.LineageService>;
  readonly lineageV2: Client<typeof v2Lineage.LineageService>;
  readonly registry: Client<typeof v1Registry.RegistryService>;
  readonly registryV2: Client<typeof v2Registry.RegistryService>;
  readonly artefacts: Client<typeof v1Artefact.ArtefactService>;
  readonly stats: Client<typeof v1Stats.StatsService>;
  readonly statsV2: Client<typeof v2Stats.StatsService>;
  readonly admin: Client<typeof v1Admin.AdminService>;
}

/** The services over one migrated database, as one app instance would wire them. */
export async function buildServices(backend: Backend): Promise<Services> {
  const { db, store } = backend;
  const keys = await loadRegistryKeys({
    configured: [{ id: "default", secret: TEST_REGISTRY_SECRET }],
    db,
    dataDir: undefined,
  });
  const resource = createResourceService({ store, limits: { maxBatchItems: 10_000, maxQueryLimit: 10_000 } });
  const lineage = createLineageService({ db });
  const registry = createRegistryService({ registry: createRegistry({ db, keys }) });
  const stats = createStatsService({ db });
  const transport = createRouterTransport((router) => {
    router.service(v1Resource.ResourceService, resource);
    router.service(v2Resource.ResourceService, resource);
    router.service(v1Lineage.LineageService, lineage);
    router.service(v2Lineage.LineageService, lineage);
    router.service(v1Registry.RegistryService, registry);
    router.service(v2Registry.RegistryService, registry);
    router.service(v1Artefact.ArtefactService, createArtefactService({ db }));
    router.service(v1Stats.StatsService, stats);
    router.service(v2Stats.StatsService, stats);
    router.service(v1Admin.AdminService, createAdminService({ db }));
  }, routerAs());
  return {
    backend,
    resources: createClient(v2Resource.ResourceService, transport),
    lineage: createClient(v1Lineage.LineageService, transport),
    lineageV2: createClient(v2Lineage.LineageService, transport),
    registry: createClient(v1Registry.RegistryService, transport),
    registryV2: createClient(v2Registry.RegistryService, transport),
    artefacts: createClient(v1Artefact.ArtefactService, transport),
    stats: createClient(v1Stats.StatsService, transport),
    statsV2: createClient(v2Stats.StatsService, transport),
    admin: createClient(v1Admin.AdminService, transport),
  };
}

/** describeBackends with the services built once per backend. */
export function describeServices(name: string, suite: (services: () => Services) => void): void {
  describeBackends(name, (backend) => {
    let services: Services | undefined;
    beforeAll(async () => {
      services = await buildServices(backend());
    });
    suite(() => {
      if (!services) throw new Error("services not ready");
      return services;
    });
  });
}
