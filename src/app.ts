// Assembles the service from its parts: database, object storage, service
// handlers, interceptors, the Connect/gRPC router and the REST gateway.
// Everything is passed in; nothing is global, so tests build the same app.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { Code, type ConnectError, createContextValues, createRouterTransport } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { checkScope, createAuthenticator, createAuthInterceptor, type Authenticator } from "./auth/index.js";
import type { Config } from "./config.js";
import type { Logger } from "./log.js";
import { createMetrics, type Metrics } from "./metrics.js";
import { createRestHandler, writeRestError } from "./rest/index.js";
import { buildRouteTable, findRoute } from "./rest/index.js";
import { createFrontDoor } from "./http/front-door.js";
import type { DescMethod } from "@bufbuild/protobuf";
import { buildOpenApi } from "./schema/openapi.js";
import { constantDocument, sendConstant, type ConstantDocument } from "./http/constant-document.js";
import { notFound } from "./errors.js";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import { ReadResponseSchema } from "../gen/resourcestore/type/v1/resource_pb.js";
import { ServerReflection } from "../gen/grpc/reflection/v1/reflection_pb.js";
import { createPlannedBinaryInterceptor } from "./protobuf/index.js";
import {
  callRecordKey,
  createCallInterceptor,
  createHealthService,
  createReflectionService,
  createReflectionServiceV1alpha,
  createServiceImpls,
  createUnaryLane,
  guardedNodeAdapter,
  logCall,
  REQUEST_ID,
  requestIdOf,
  revisions,
  type CallRecord,
  ServerReflectionV1alpha,
  serviceName,
  type ServiceImpls,
} from "./rpc/index.js";
import type { RequestHandler } from "./server.js";
import { createEventFeed, createLineageRefresher, createNotifications, loadRegistryKeys, migrate, openDatabase, type Db, type EventFeed, type LineageRefresher, type Notifications, type RegistryKey } from "./store/index.js";
import { createObjectStorage, type ObjectStorage } from "./storage/index.js";
import { createEncoderPool, type EncoderPool } from "./parquet/index.js";
import { withCors } from "./cors.js";
import { defaultUiDir, withUi } from "./ui-assets.js";

export interface App {
  readonly handler: RequestHandler;
  readonly db: Db;
  readonly storage: ObjectStorage;
  readonly auth: Authenticator;
  readonly metrics: Metrics;
  /** The parquet encoder workers every export shares (PARQUET_ENCODER_WORKERS). */
  readonly encoders: EncoderPool;
  /** Whether the database answers. */
  ready(): Promise<boolean>;
  /** Ends every open change-feed stream (Watch, /events) cleanly: call on shutdown, before draining. */
  endStreams(): Promise<void>;
  /** Close the database and object storage (after the listener has drained). */
  close(): Promise<void>;
}

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

function sendJson(res: Res, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

const allServices = revisions.flatMap((r) => r.services);

/**
 * Connect JSON writes the proto field names (as_of, next_cursor), the names
 * the REST bodies use; it reads both spellings.
 */
const CONNECT_JSON = { useProtoFieldName: true } as const;

export function routesFor(impls: ServiceImpls, ready: () => Promise<boolean>): (router: ConnectRouter) => void {
  const health = createHealthService({ ready, services: allServices.map((s) => s.typeName) });
  const reflection = createReflectionService([...allServices, Health, ServerReflection, ServerReflectionV1alpha]);
  return (router) => {
    for (const svc of allServices) {
      // Methods a handler object lacks answer `unimplemented`.
      router.service(svc, impls[serviceName(svc)] ?? {});
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
}

export async function createApp(config: Config, log: Logger, opts: AppOptions = {}): Promise<App> {
  // Before anything opens: a bad token file fails start-up, not the first call.
  const auth = opts.auth ?? createAuthenticator(config.auth);
  const db = await openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    poolSize: config.databasePoolSize,
    readUrls: config.readReplicas.urls,
    readTimeoutMs: config.readReplicas.timeoutMs,
    readStampTtlMs: config.readReplicas.stampTtlMs,
    statementTimeoutMs: config.defence.databaseStatementTimeoutMs,
    idleInTransactionMs: config.defence.databaseIdleInTransactionMs,
  });
  let storage: ObjectStorage | undefined;
  let refresher: LineageRefresher | undefined;
  let registryKeys: RegistryKey[];
  let notifications: Notifications | undefined;
  let feed: EventFeed | undefined;
  try {
    await migrate(db);
    // Before anything else starts: no key on PostgreSQL, or one left in the database, stops start-up here.
    registryKeys = await loadRegistryKeys({ configured: config.registryKeys, db, dataDir: db.dataDir });
    storage = await createObjectStorage(config);
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
    // Where there is a lineage view and LISTEN, the view follows committed tree changes.
    if (db.capabilities.lineageView && db.capabilities.listen) {
      refresher = createLineageRefresher({
        db,
        onError: (err) => log.warn({ err }, "lineage view refresh failed; will retry"),
      });
      await refresher.start();
    }
  } catch (err) {
    await feed?.close();
    await refresher?.stop();
    await notifications?.close();
    await storage?.close();
    await db.close();
    throw err;
  }
  const ready = async (): Promise<boolean> => {
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
  const metrics = createMetrics({ poolStats: db.poolStats?.bind(db), readCounts: db.readCounts?.bind(db) });
  // Outermost first: metrics see the codes clients see; the call interceptor
  // gives auth refusals a request id and a log line.
  // The planned binary encoder goes first (outermost): it hands connect bytes, and every other interceptor sees the message.
  const interceptors: Interceptor[] = [
    createPlannedBinaryInterceptor([ReadResponseSchema]),
    metrics.interceptor,
    createCallInterceptor(log),
    createAuthInterceptor(auth),
  ];
  const routes = routesFor(impls, ready);
  const transport = createRouterTransport(routes, {
    router: { interceptors, readMaxBytes: config.limits.maxBodyBytes },
  });
  // A REST request's log record (see `fallback`): the call of the request fills it.
  const callRecords = new WeakMap<Req, CallRecord>();
  // A call answered without the interceptors (refused at the front door, or a
  // cached constant document): the log line and metrics they would write.
  const recordCall = (method: DescMethod, err: ConnectError | undefined, req: Req, started: bigint): void => {
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const rpc = `${method.parent.typeName}/${method.name}`;
    metrics.record(`/${rpc}`, err === undefined ? "ok" : codeToString(err.code), seconds);
    const code = err === undefined ? "ok" : Code[err.code];
    logCall(log, callRecords.get(req), requestIdOf(req.headers[REQUEST_ID] as string | undefined), rpc, code, seconds * 1000);
  };
  // Unary calls of our services, REST and plain Connect, run their interceptors and handlers in process.
  const lane = createUnaryLane({
    services: allServices,
    impls: new Map(allServices.flatMap((s) => {
      const impl = impls[serviceName(s)];
      return impl === undefined ? [] : [[s.typeName, impl] as const];
    })),
    interceptors,
    readMaxBytes: config.limits.maxBodyBytes,
    jsonOptions: CONNECT_JSON,
  });
  const rest = createRestHandler({
    revisions,
    transport,
    lane,
    maxBodyBytes: config.limits.maxBodyBytes,
    stallMs: config.defence.exportStallMs,
    // Constant documents, once cached, are answered after the auth interceptor's own check.
    authorize: (method, message, authorization) => checkScope(auth, method, message, authorization),
    onConstant: recordCall,
    contextValuesFor: (req) => {
      const record = callRecords.get(req);
      return record === undefined ? undefined : createContextValues().set(callRecordKey, record);
    },
  });
  let openApiDoc: ConstantDocument | undefined;
  const openApi = (): ConstantDocument => (openApiDoc ??= constantDocument(JSON.stringify(buildOpenApi(revisions))));

  const fallback = (req: Req, res: Res): void => {
    // REST requests get their request id here, so that a request refused by
    // the gateway (bad JSON, body too large) has one too; the gateway passes
    // it on to the call interceptor, so both log lines share it. The path is
    // logged without its query string (which may carry values).
    const requestId = requestIdOf(req.headers[REQUEST_ID] as string | undefined);
    req.headers[REQUEST_ID] = requestId;
    res.setHeader(REQUEST_ID, requestId);
    // One line per REST request: a `call` line when the request was a call
    // (its rpc and code, filled in by the call, beside the HTTP fields), else
    // an `http` line once the answer is sent. A call still running when its
    // client goes away writes its own line when it ends.
    const started = process.hrtime.bigint();
    const record: CallRecord = { closed: false };
    callRecords.set(req, record);
    res.once("close", () => {
      record.closed = true;
      const { rpc } = record;
      if (rpc === undefined && !res.writableFinished) return;
      const durationMs = Math.round(Number(process.hrtime.bigint() - started) / 1e3) / 1e3;
      const url = req.url ?? "/";
      const query = url.indexOf("?");
      const path = (query === -1 ? url : url.slice(0, query)).slice(0, 200);
      // Written out in full, not spread: this runs for every request (BENCHMARKS.md, issue 21).
      if (rpc !== undefined) log.info({ request_id: requestId, rpc, code: record.code, method: req.method, path, status: res.statusCode, duration_ms: durationMs }, "call");
      else log.info({ request_id: requestId, method: req.method, path, status: res.statusCode, duration_ms: durationMs }, "http");
    });
    void (async () => {
      try {
        if (await rest(req, res)) return;
        const path = (req.url ?? "/").split("?")[0];
        if (req.method === "GET" && path === "/healthz") return sendJson(res, 200, { status: "ok" });
        if (req.method === "GET" && path === "/openapi.json") return sendConstant(req, res, openApi());
        if (req.method === "GET" && path === "/metrics") {
          const text = await metrics.render();
          res.writeHead(200, { "content-type": metrics.contentType, "content-length": Buffer.byteLength(text) });
          res.end(text);
          return;
        }
        if (req.method === "GET" && path === "/readyz") {
          const ok = await ready();
          return sendJson(res, ok ? 200 : 503, { status: ok ? "ok" : "unavailable" });
        }
        writeRestError(res, notFound(`no route for ${req.method ?? "?"} ${path ?? "/"}`, "NO_OPERATION"));
      } catch (err) {
        log.error({ err }, "fallback failed");
        if (!res.headersSent) writeRestError(res, err);
        else res.destroy();
      }
    })();
  };

  const rpc = guardedNodeAdapter({
    routes,
    interceptors,
    readMaxBytes: config.limits.maxBodyBytes,
    jsonOptions: CONNECT_JSON,
    lane,
    fallback: fallback as never,
  });
  // Paths as sent and credentials before any body is read (API.md section 16).
  const rpcPaths = new Map<string, DescMethod>();
  for (const svc of [...allServices, Health, ServerReflection]) for (const m of svc.methods) rpcPaths.set(`/${svc.typeName}/${m.name}`, m);
  const restTable = buildRouteTable(revisions);
  const frontDoor = createFrontDoor(
    {
      auth,
      resolve: (verb, rawPath) => {
        const rpc = rpcPaths.get(rawPath);
        if (rpc !== undefined) return rpc;
        const rest = findRoute(restTable, verb, rawPath);
        return rest.kind === "found" ? rest.route.method : undefined;
      },
      // A refusal before the body is still a call: one log line and the metrics, as the interceptors would write.
      onRefused: recordCall,
    },
    rpc,
  );
  // Browsers (API.md section 15): CORS in front of every route (so refusals carry it too), then the explorer.
  const handler = withCors(config.corsOrigins, withUi(opts.uiDir ?? defaultUiDir(), frontDoor));

  return {
    handler,
    db,
    storage,
    auth,
    metrics,
    encoders,
    ready,
    endStreams: () => feed.close(),
    async close() {
      await feed.close();
      await refresher?.stop();
      await notifications.close();
      await Promise.allSettled([db.close(), storage?.close(), encoders.close()]);
    },
  };
}
