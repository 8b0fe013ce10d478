// The service handlers, keyed by service name. The same handler object
// serves both revisions of a service (they share message types); a revision
// simply exposes the methods its descriptor lists.
import type { Config } from "../config.js";
import type { Logger } from "../log.js";
import type { Db } from "../store/index.js";
import { createResourceStore } from "../store/index.js";
import type { ObjectStorage } from "../storage/index.js";
import type { ServiceName } from "./revisions.js";
import { createQueryService } from "./query-service.js";
import { createResourceService } from "./resource-service.js";
import { createSchemaService } from "./schema-service.js";
import { createStorageService } from "./storage-service.js";

export type ServiceImpls = Partial<Record<ServiceName, object>>;

export interface ServiceDeps {
  readonly config: Config;
  readonly db: Db;
  readonly storage: ObjectStorage;
  readonly log: Logger;
}

export function createServiceImpls(deps: ServiceDeps): ServiceImpls {
  const limits = deps.config.limits;
  return {
    ResourceService: createResourceService({ store: createResourceStore(deps.db), limits }),
    QueryService: createQueryService({
      db: deps.db,
      cursorSecret: deps.config.cursorSecret,
      onError: (err) => deps.log.error({ err }, "parquet export failed"),
    }),
    SchemaService: createSchemaService(),
    StorageService: createStorageService({
      storage: deps.storage,
      limits,
      presignExpiresSeconds: deps.config.s3.presignExpiresSeconds,
    }),
  };
}
