// Assembles the service from its parts: database, object storage, service
// handlers, interceptors, the Connect/gRPC router and the REST gateway.
// Everything is passed in; nothing is global, so tests build the same app.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { createRouterTransport } from "@connectrpc/connect";
import { createAuthenticator, createAuthInterceptor, type Authenticator } from "./auth/index.js";
import type { Config } from "./config.js";
import type { Logger } from "./log.js";
import { createMetrics, type Metrics } from "./metrics.js";
import { createRestHandler, writeRestError } from "./rest/index.js";
import { buildOpenApi } from "./schema/openapi.js";
import { notFound } from "./errors.js";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../gen/grpc/reflection/v1/reflection_pb.js";
import { createHealthService } from "./rpc/health-service.js";
import { guardedNodeAdapter } from "./rpc/binary-guard.js";
import { createCallInterceptor, REQUEST_ID, requestIdOf } from "./rpc/interceptors.js";
import { createReflectionService } from "./rpc/reflection-service.js";
import { createServiceImpls, type ServiceImpls } from "./rpc/index.js";
import { revisions, serviceName } from "./rpc/revisions.js";
import type { RequestHandler } from "./server.js";
import { openDatabase, migrate, type Db } from "./store/index.js";
import { createLineageRefresher, type LineageRefresher } from "./store/lineage-refresher.js";
import { createObjectStorage, type ObjectStorage } from "./storage/index.js";

export interface App {
  readonly handler: RequestHandler;
  readonly db: Db;
  readonly storage: ObjectStorage;
  readonly auth: Authenticator;
  readonly metrics: Metrics;
  /** Whether the database answers. */
  ready(): Promise<boolean>;
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

export function routesFor(impls: ServiceImpls, ready: () => Promise<boolean>): (router: ConnectRouter) => void {
  const health = createHealthService({ ready, services: allServices.map((s) => s.typeName) });
  const reflection = createReflectionService([...allServices, Health, ServerReflection]);
  return (router) => {
    for (const svc of allServices) {
      // Methods a handler object lacks answer `unimplemented`.
      router.service(svc, (impls[serviceName(svc)] ?? {}) as never);
    }
    router.service(Health, health);
    router.service(ServerReflection, reflection);
  };
}

export interface AppOptions {
  /** Defaults to the one config.auth describes. */
  readonly auth?: Authenticator;
}

export async function createApp(config: Config, log: Logger, opts: AppOptions = {}): Promise<App> {
  // Before anything opens: a bad token file fails start-up, not the first call.
  const auth = opts.auth ?? createAuthenticator(config.auth);
  const db = await openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.databaseUrl === undefined ? config.dataDir : undefined,
    poolSize: config.databasePoolSize,
  });
  let storage: ObjectStorage | undefined;
  let refresher: LineageRefresher | undefined;
  try {
    await migrate(db);
    storage = await createObjectStorage(config);
    // On PostgreSQL the lineage view follows committed tree changes (LISTEN/NOTIFY).
    if (config.databaseUrl !== undefined) {
      refresher = createLineageRefresher({
        db,
        databaseUrl: config.databaseUrl,
        onError: (err) => log.warn({ err }, "lineage view refresh failed; will retry"),
      });
      await refresher.start();
    }
  } catch (err) {
    await refresher?.stop();
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
  const impls = await createServiceImpls({ config, db, storage, log });
  const metrics = createMetrics({ poolStats: db.poolStats?.bind(db) });
  // Outermost first: metrics see the codes clients see; the call interceptor
  // gives auth refusals a request id and a log line.
  const interceptors: Interceptor[] = [metrics.interceptor, createCallInterceptor(log), createAuthInterceptor(auth)];
  const routes = routesFor(impls, ready);
  const transport = createRouterTransport(routes, {
    router: { interceptors, readMaxBytes: config.limits.maxBodyBytes },
  });
  const rest = createRestHandler({ revisions, transport, maxBodyBytes: config.limits.maxBodyBytes });
  let openApiDoc: unknown;
  const openApi = (): unknown => (openApiDoc ??= buildOpenApi(revisions));

  const fallback = (req: Req, res: Res): void => {
    // REST requests get their request id here, so that a request refused by
    // the gateway (bad JSON, body too large) has one too; the gateway passes
    // it on to the call interceptor, so both log lines share it. The path is
    // logged without its query string (which may carry values).
    const requestId = requestIdOf(req.headers[REQUEST_ID] as string | undefined);
    req.headers[REQUEST_ID] = requestId;
    res.setHeader(REQUEST_ID, requestId);
    const started = process.hrtime.bigint();
    res.once("finish", () => {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      log.info(
        { request_id: requestId, method: req.method, path: (req.url ?? "/").split("?")[0]?.slice(0, 200), status: res.statusCode, duration_ms: Math.round(ms * 1000) / 1000 },
        "http",
      );
    });
    void (async () => {
      try {
        if (await rest(req, res)) return;
        const path = (req.url ?? "/").split("?")[0];
        if (req.method === "GET" && path === "/healthz") return sendJson(res, 200, { status: "ok" });
        if (req.method === "GET" && path === "/openapi.json") return sendJson(res, 200, openApi());
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
        writeRestError(res, notFound(`no route for ${req.method ?? "?"} ${path ?? "/"}`));
      } catch (err) {
        log.error({ err }, "fallback failed");
        if (!res.headersSent) writeRestError(res, err);
        else res.destroy();
      }
    })();
  };

  const handler = guardedNodeAdapter({
    routes,
    interceptors,
    readMaxBytes: config.limits.maxBodyBytes,
    // Connect JSON writes the proto field names (as_of, next_cursor), the
    // names the REST bodies use; it reads both spellings.
    jsonOptions: { useProtoFieldName: true },
    fallback: fallback as never,
  }) as RequestHandler;

  return {
    handler,
    db,
    storage,
    auth,
    metrics,
    ready,
    async close() {
      await refresher?.stop();
      await Promise.allSettled([db.close(), storage?.close()]);
    },
  };
}
