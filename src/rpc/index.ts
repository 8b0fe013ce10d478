// The service handlers, keyed by service name. The same handler object
// serves both revisions of a service (they share message types); a revision
// simply exposes the methods its descriptor lists.
import type { Config } from "../config.js";
import type { Logger } from "../log.js";
import type { EncoderPool } from "../parquet/index.js";
import type { ObjectStorage } from "../storage/index.js";
import type { Db, EventFeed } from "../store/index.js";
import { createRegistry, createResourceStore, loadRegistryKeys, type RegistryKey } from "../store/index.js";
import { createAdminService } from "./admin-service.js";
import { createArtefactService } from "./artefact-service.js";
import { createEventService } from "./event-service.js";
import { createIdentityService } from "./identity-service.js";
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
  /** Loaded at start-up (loadRegistryKeys); loaded here when absent. */
  readonly registryKeys?: readonly RegistryKey[];
  /** The change feed; without it EventService answers `unimplemented`. */
  readonly feed?: EventFeed;
  /** The process's parquet encoder workers; without it the query service makes its own. */
  readonly encoders?: EncoderPool;
}

export async function createServiceImpls(deps: ServiceDeps): Promise<ServiceImpls> {
  const { config, db, log } = deps;
  const limits = config.limits;
  const keys =
    deps.registryKeys ?? (await loadRegistryKeys({ configured: config.registryKeys, db, dataDir: db.dataDir }));
  return {
    ResourceService: createResourceService({
      store: createResourceStore(db, { maxTreeDepth: config.defence.maxTreeDepth, cursorSecret: config.cursorSecret }),
      limits,
    }),
    QueryService: createQueryService({
      db,
      cursorSecret: config.cursorSecret,
      maxLimit: limits.maxQueryLimit,
      maxFilterDepth: config.defence.maxFilterDepth,
      exports: {
        max: config.defence.maxConcurrentExports,
        queueMs: config.defence.exportQueueMs,
        stallMs: config.defence.exportStallMs,
      },
      onError: (err) => log.error({ err }, "parquet export failed"),
      ...(deps.encoders ? { encoders: deps.encoders } : {}),
    }),
    LineageService: createLineageService({ db, maxChildren: config.defence.maxChildren }),
    RegistryService: createRegistryService({ registry: createRegistry({ db, keys }) }),
    ArtefactService: createArtefactService({ db }),
    StatsService: createStatsService({ db }),
    SchemaService: createSchemaService(),
    StorageService: createStorageService({
      storage: deps.storage,
      db,
      limits,
      presignExpiresSeconds: config.s3.presignExpiresSeconds,
      maxPreviewBytes: config.defence.maxPreviewBytes,
    }),
    AdminService: createAdminService({ db }),
    IdentityService: createIdentityService(),
    ...(deps.feed
      ? { EventService: createEventService({ feed: deps.feed, heartbeatMs: config.events.heartbeatMs }) }
      : {}),
  };
}

// The rest of the rpc layer's public surface: the pieces app.ts assembles,
// and each service's factory (tests build services one by one).
export { guardedNodeAdapter, guardBinaryBodies } from "./binary-guard.js";
export { createFeedLane } from "./feed-lane.js";
export { ACCEPT_COMPRESSION, createPipeline, type Pipeline } from "./pipeline.js";
export { sharedCompression } from "./shared-compression.js";
export { createUnaryLane, type UnaryLane } from "./unary-lane.js";
export { createHealthService } from "./health-service.js";
export { auditSink, auditTargetProblem, isAudited, type AuditSink } from "./audit.js";
export { logCall } from "./interceptors.js";
export { createLaneTransport } from "./lane-transport.js";
export {
  createReflectionService,
  createReflectionServiceV1alpha,
  ServerReflectionV1alpha,
} from "./reflection-service.js";
export { revisions, serviceName } from "./revisions.js";
export { createAdminService } from "./admin-service.js";
export { preEncoded, toEventMessage } from "./event-service.js";
export { createArtefactService } from "./artefact-service.js";
export { createLineageService, treeNode } from "./lineage-service.js";
export { createQueryService, type QueryServiceDeps } from "./query-service.js";
export { createRegistryService } from "./registry-service.js";
export { createResourceService, toResourceMessage } from "./resource-service.js";
export { createSchemaService } from "./schema-service.js";
export { createStatsService } from "./stats-service.js";
export { createStorageService, type StorageServiceDeps } from "./storage-service.js";
