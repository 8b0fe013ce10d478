// Assembles the service from its parts: database, object storage, service
// handlers, the pipeline every call runs (rpc/pipeline.ts), the Connect/gRPC
// adapter, the REST gateway, the paths outside the API (ops-routes.ts) and
// the layers in front (front door, CORS, the explorer). It routes nothing
// itself. Everything is passed in, and no state lives in a module: each app
// has its own database, statement names, metrics registry and caches, so
// tests build the same app as many times as they like.
import type { ConnectRouter } from "@connectrpc/connect";
import { Code, type Transport } from "@connectrpc/connect";
import { checkScope, createAuthenticator, type Authenticator } from "./auth/index.js";
import { ConfigError, type Config } from "./config.js";
import type { Logger } from "./log.js";
import { createMetrics, type Metrics } from "./metrics.js";
import { createRestHandler } from "./rest/index.js";
import { createFrontDoor } from "./http/front-door.js";
import { logRequest } from "./http/request-line.js";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../gen/grpc/reflection/v1/reflection_pb.js";
import { createHttpFallback } from "./http-fallback.js";
import { createOpsRoutes } from "./ops-routes.js";
import {
  auditSink,
  auditTargetProblem,
  type AuditSink,
  createHealthService,
  createPipeline,
  createReflectionService,
  createReflectionServiceV1alpha,
  createServiceImpls,
  createFeedLane,
  createLaneTransport,
  createUnaryLane,
  guardedNodeAdapter,
  revisions,
  type Pipeline,
  ServerReflectionV1alpha,
  serviceName,
  type ServiceImpls,
} from "./rpc/index.js";
import type { RequestHandler } from "./server.js";
import {
  createEventFeed,
  createNotifications,
  loadRegistryKeys,
  correctModes,
  migrate,
  openDatabase,
  secureDataDir,
  type Db,
  type EventFeed,
  type Notifications,
  type RegistryKey,
} from "./store/index.js";
import { createObjectStorage, type ObjectStorage } from "./storage/index.js";
import { createEncoderPool, type EncoderPool } from "./parquet/index.js";
import { assertCorsSafe, withCors } from "./cors.js";
import { allowedHostsFor, withAllowedHosts } from "./http/host-check.js";
import { defaultUiDir, withUi } from "./ui-assets.js";
import { startTracing, type Tracing } from "./tracing/index.js";

export interface App {
  readonly handler: RequestHandler;
  readonly db: Db;
  readonly storage: ObjectStorage;
  readonly auth: Authenticator;
  readonly metrics: Metrics;
  /** The parquet encoder workers every export shares (PARQUET_ENCODER_WORKERS). */
  readonly encoders: EncoderPool;
  /** Calls made by the process itself, through the same pipeline as every call (the DICOM receiver's, src/dicom/receiver.ts). */
  readonly localTransport: Transport;
  /** Whether the database answers. */
  ready(): Promise<boolean>;
  /** Ends every open change-feed stream (Watch, /events) cleanly: call on shutdown, before draining. */
  endStreams(): Promise<void>;
  /** Close the database and object storage (after the listener has drained). */
  close(): Promise<void>;
}

const allServices = revisions.flatMap((r) => r.services);

/** `pipeline`: the feed's streams compress with its feedCompression (the other options are the router's). */
function routesFor(
  impls: ServiceImpls,
  ready: () => Promise<boolean>,
  pipeline: Pick<Pipeline, "feedCompression">,
): (router: ConnectRouter) => void {
  const health = createHealthService({ ready, services: allServices.map((s) => s.typeName) });
  const reflection = createReflectionService([...allServices, Health, ServerReflection, ServerReflectionV1alpha]);
  return (router) => {
    for (const svc of allServices) {
      // Methods a handler object lacks answer `unimplemented`.
      const impl = impls[serviceName(svc)] ?? {};
      // The same compressions as every call (requests compressed with them are
      // read as before), but a feed message is compressed once for all its streams.
      if (serviceName(svc) === "EventService")
        router.service(svc, impl, { acceptCompression: [...pipeline.feedCompression] });
      else router.service(svc, impl);
    }
    router.service(Health, health);
    router.service(ServerReflection, reflection);
    router.service(ServerReflectionV1alpha, createReflectionServiceV1alpha(reflection));
  };
}

export interface AppOptions {
  /** Defaults to the one config.auth describes. */
  readonly auth?: Authenticator;
  /** The built explorer (index.html and assets); defaults to dist/ui of the package. */
  readonly uiDir?: string;
  /**
   * Tracing made by the caller (tests, with an in-memory exporter); the
   * caller shuts it down. Default: started here when config.tracing is set.
   */
  readonly tracing?: Tracing;
  /** Where audit lines go; defaults to config.auditLog's sink (none when unset). */
  readonly auditSink?: AuditSink;
}

export async function createApp(config: Config, log: Logger, opts: AppOptions = {}): Promise<App> {
  // Before anything opens: a bad token file fails start-up, not the first call.
  const auth =
    opts.auth ??
    createAuthenticator(config.auth, {
      onKeyFetchFailure: (message) =>
        log.warn(
          { error: message },
          "the identity provider's keys could not be fetched; the last good keys serve until OIDC_JWKS_MAX_STALE_MS",
        ),
    });
  assertCorsSafe(config.corsOrigins, auth.enabled);
  // An AUDIT_LOG that cannot be written fails start-up, saying why, rather than every read (docs/operations.md).
  const auditTarget = opts.auditSink === undefined ? config.auditLog : undefined;
  const auditProblem = auditTarget === undefined ? undefined : await auditTargetProblem(auditTarget);
  if (auditProblem !== undefined) {
    log.error({ audit_log: auditTarget }, `AUDIT_LOG ${auditProblem}: not starting`);
    throw new ConfigError("AUDIT_LOG", `${JSON.stringify(auditTarget)} ${auditProblem}`);
  }
  // Loaded only when configured (docs/tracing.md): without it no OpenTelemetry SDK module is imported and nothing below is wrapped.
  const ownTracing = opts.tracing === undefined && config.tracing ? await startTracing() : undefined;
  const tracing = opts.tracing ?? ownTracing;
  // DATA_DIR is owner-only (src/store/data-dir.ts): what this process creates there, and what an earlier one left wider.
  const usesDataDir = config.databaseUrl === undefined || config.s3.endpoint === undefined;
  const corrected = usesDataDir ? await secureDataDir(config.dataDir) : 0;
  if (corrected > 0)
    log.warn(
      { dataDir: config.dataDir, corrected },
      "DATA_DIR held files or directories other users could read or change; made them owner-only (0600/0700)",
    );
  const untracedDb = await openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    poolSize: config.databasePoolSize,
    readUrls: config.readReplicas.urls,
    readTimeoutMs: config.readReplicas.timeoutMs,
    readStampTtlMs: config.readReplicas.stampTtlMs,
    statementTimeoutMs: config.defence.databaseStatementTimeoutMs,
    idleInTransactionMs: config.defence.databaseIdleInTransactionMs,
  }).catch(async (err: unknown) => {
    await ownTracing?.shutdown();
    throw err;
  });
  const db = tracing === undefined ? untracedDb : tracing.traceDb(untracedDb);
  let storage: ObjectStorage | undefined;
  let registryKeys: RegistryKey[];
  let notifications: Notifications | undefined;
  let feed: EventFeed | undefined;
  try {
    await migrate(db);
    // Before anything else starts: no key on PostgreSQL, or one left in the database, stops start-up here.
    registryKeys = await loadRegistryKeys({ configured: config.registryKeys, db, dataDir: db.dataDir });
    // PGlite sets the modes of a few files it writes as it starts (its relation cache files, 0644) itself, past the umask.
    if (usesDataDir) await correctModes(config.dataDir);
    storage = await createObjectStorage(config);
    if (tracing !== undefined) storage = tracing.traceStorage(storage);
    // One listening hub per process for the change feed (LISTEN/NOTIFY on PostgreSQL, in-process on PGlite).
    notifications = createNotifications(db, {
      onError: (err) => log.warn({ err }, "listening connection lost; reconnecting"),
    });
    feed = createEventFeed({
      db,
      notifications,
      pageSize: config.events.pageSize,
      maxMessageBytes: config.events.maxMessageBytes,
      maxStreams: config.events.maxStreams,
      // Polled this often only while no LISTEN connection is up.
      pollMs: Math.min(250, config.events.heartbeatMs),
    });
  } catch (err) {
    await feed?.close();
    await notifications?.close();
    await storage?.close();
    await db.close();
    await ownTracing?.shutdown();
    throw err;
  }
  // Readiness also needs the audit log (when it is a file): a read would answer 503 without it.
  let auditDown = false;
  const ready = async (): Promise<boolean> => {
    if (auditTarget !== undefined) {
      const problem = await auditTargetProblem(auditTarget);
      if (problem !== undefined) {
        if (!auditDown) log.error({ audit_log: auditTarget }, `AUDIT_LOG ${problem}: not ready`);
        auditDown = true;
        return false;
      }
      if (auditDown) log.info({ audit_log: auditTarget }, "AUDIT_LOG can be written again");
      auditDown = false;
    }
    try {
      await db.ping();
      return true;
    } catch {
      return false;
    }
  };
  // One pool of encoder workers for every parquet export of the process; its threads start on the first export.
  const encoders = createEncoderPool(config.parquetEncoderWorkers);
  const impls = await createServiceImpls({ config, db, storage, log, registryKeys, feed, encoders });
  const metrics = createMetrics({ poolStats: db.poolStats?.bind(db), readCounts: db.readCounts?.bind(db), feed });
  // Every call, whichever path it takes below, runs this one pipeline: its
  // interceptors, body limit, compressions and JSON options (rpc/pipeline.ts,
  // where access, audit and tracing take their slots).
  // The audit (AUDIT_LOG, or the sink a test passes): its slot is inside auth, so its lines name the actor.
  const audit = opts.auditSink ?? (config.auditLog !== undefined ? auditSink(config.auditLog) : undefined);
  const pipeline = createPipeline({
    log,
    auth,
    metrics,
    maxBodyBytes: config.limits.maxBodyBytes,
    ...(tracing !== undefined ? { tracing } : {}),
    ...(audit !== undefined ? { audit } : {}),
  });
  const routes = routesFor(impls, ready, pipeline);
  // The handler objects by service type name, for the lanes.
  const implsByType = new Map(
    allServices.flatMap((s) => {
      const impl = impls[serviceName(s)];
      return impl === undefined ? [] : [[s.typeName, impl] as const];
    }),
  );
  // Unary calls of our services, REST and plain Connect, run their interceptors and handlers in process.
  const lane = createUnaryLane({ services: allServices, impls: implsByType, pipeline });
  // The process's own calls (the DICOM receiver's) take the lane too.
  const localTransport = createLaneTransport(lane);
  const rest = createRestHandler({
    revisions,
    transport: localTransport,
    lane,
    maxBodyBytes: pipeline.readMaxBytes,
    acceptCompression: pipeline.acceptCompression,
    stallMs: config.defence.exportStallMs,
    // Constant documents, once cached, are answered after the auth interceptor's own check.
    authorize: (method, message, authorization, atDoor) => checkScope(auth, method, message, authorization, atDoor),
    onConstant: (method, err, arrival, req) => pipeline.answeredWithout(method, err, arrival, req),
  });
  // Requests for no RPC path: REST, then /healthz, /readyz, /metrics, /openapi.json, else 404.
  const fallback = createHttpFallback({ log, rest, ops: createOpsRoutes({ metrics, ready }) });

  // A gRPC Watch (the plain case) writes each feed message's one envelope to all its streams.
  const feedLane = createFeedLane({
    services: allServices.filter((s) => serviceName(s) === "EventService"),
    impls: implsByType,
    pipeline,
  });
  const rpc = guardedNodeAdapter({ routes, pipeline, lane, feedLane, fallback });
  // Paths as sent and credentials before any body is read (docs/contract/16-limits.md).
  const frontDoor = createFrontDoor(
    {
      auth,
      // Once per request: an RPC path's method, else the REST route (which the gateway then uses as it is).
      resolve: (verb, rawPath, req) => rpc.resolve(rawPath) ?? rest.resolve(verb, req),
      // A refusal before the body is still a call: what the interceptors would have written (pipeline.ts);
      // a REST request's or unknown path's line is the request's, with its HTTP fields.
      onRefused: ({ method, rpcPath }, err, req, arrival, status) => {
        if (method !== undefined && rpcPath) return pipeline.answeredWithout(method, err, arrival, req);
        arrival.record = { closed: false };
        if (method !== undefined) pipeline.answeredWithout(method, err, arrival, req);
        logRequest(log, arrival, { method: req.method, url: req.url, status, code: Code[err.code] });
      },
    },
    rpc,
  );
  // Browsers (docs/contract/15-browsers.md): CORS in front of every route (so refusals carry it too), then the explorer.
  // Host first (docs/contract/16-limits.md): a rebinding page's request is refused before CORS or any route.
  const handler = withAllowedHosts(
    allowedHostsFor(auth.enabled, config.allowedHosts),
    withCors(config.corsOrigins, withUi(opts.uiDir ?? defaultUiDir(), frontDoor)),
  );

  return {
    handler,
    db,
    storage,
    auth,
    metrics,
    encoders,
    localTransport,
    ready,
    endStreams: () => feed.close(),
    async close() {
      await feed.close();
      await notifications.close();
      await Promise.allSettled([db.close(), storage?.close(), encoders.close()]);
      // And as it stops (its statistics file): a closed store is owner-only too.
      if (usesDataDir) await correctModes(config.dataDir).catch(() => 0);
      // Last: what the closing calls traced is exported before the SDK stops.
      await ownTracing?.shutdown();
    },
  };
}
