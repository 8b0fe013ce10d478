// The service handlers, keyed by service name. The same handler object
// serves both revisions of a service (they share message types); a revision
// simply exposes the methods its descriptor lists.
import type { Config } from "../config.js";
import type { Logger } from "../log.js";
import { loadRegistrySecret } from "../registry-secret.js";
import type { ObjectStorage } from "../storage/index.js";
import type { Db } from "../store/index.js";
import { createResourceStore } from "../store/index.js";
import { createRegistry } from "../store/registry.js";
import { createAdminService } from "./admin-service.js";
import { createArtefactService } from "./artefact-service.js";
import { createLineageService } from "./lineage-service.js";
import { createQueryService } from "./query-service.js";
import { createRegistryService } from "./registry-service.js";
import { createResourceService } from "./resource-service.js";
import type { ServiceName } from "./revisions.js";
import { createSchemaService } from "./schema-service.js";
import { createStatsService } from "./stats-service.js";
import { createStorageService } from "./storage-service.js";

export type ServiceImpls = Partial<Record<ServiceName, object>>;

export interface ServiceDeps {
  readonly config: Config;
  readonly db: Db;
  readonly storage: ObjectStorage;
  readonly log: Logger;
}

export async function createServiceImpls(deps: ServiceDeps): Promise<ServiceImpls> {
  const { config, db, log } = deps;
  const limits = config.limits;
  const secret = await loadRegistrySecret({
    secret: config.registrySecret,
    db,
    dataDir: config.databaseUrl === undefined ? config.dataDir : undefined,
  });
  return {
    ResourceService: createResourceService({ store: createResourceStore(db), limits }),
    QueryService: createQueryService({
      db,
      cursorSecret: config.cursorSecret,
      maxLimit: limits.maxQueryLimit,
      onError: (err) => log.error({ err }, "parquet export failed"),
    }),
    LineageService: createLineageService({ db }),
    RegistryService: createRegistryService({ registry: createRegistry({ db, secret }) }),
    ArtefactService: createArtefactService({ db }),
    StatsService: createStatsService({ db }),
    SchemaService: createSchemaService(),
    StorageService: createStorageService({
      storage: deps.storage,
      limits,
      presignExpiresSeconds: config.s3.presignExpiresSeconds,
    }),
    AdminService: createAdminService({ db }),
  };
}
