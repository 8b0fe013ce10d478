// Assembles the service from its parts: database, object storage, service
// handlers, interceptors, the Connect/gRPC router and the REST gateway.
// Everything is passed in; nothing is global, so tests build the same app.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { createRouterTransport } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { Config } from "./config.js";
import type { Logger } from "./log.js";
import { createRestHandler, writeRestError } from "./rest/index.js";
import { buildOpenApi } from "./schema/openapi.js";
import { notFound } from "./errors.js";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../gen/grpc/reflection/v1/reflection_pb.js";
import { createHealthService } from "./rpc/health-service.js";
import { createCallInterceptor } from "./rpc/interceptors.js";
import { createReflectionService } from "./rpc/reflection-service.js";
import { createServiceImpls, type ServiceImpls } from "./rpc/index.js";
import { revisions, serviceName } from "./rpc/revisions.js";
import type { RequestHandler } from "./server.js";
import { openDatabase, migrate, type Db } from "./store/index.js";
import { createObjectStorage, type ObjectStorage } from "./storage/index.js";

export interface App {
  readonly handler: RequestHandler;
  readonly db: Db;
  readonly storage: ObjectStorage;
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

export async function createApp(config: Config, log: Logger): Promise<App> {
  const db = await openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.databaseUrl === undefined ? config.dataDir : undefined,
    poolSize: config.databasePoolSize,
  });
  let storage: ObjectStorage | undefined;
  try {
    await migrate(db);
    storage = await createObjectStorage(config);
  } catch (err) {
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
  const impls = createServiceImpls({ config, db, storage, log });
  const interceptors: Interceptor[] = [createCallInterceptor(log)];
  const routes = routesFor(impls, ready);
  const transport = createRouterTransport(routes, {
    router: { interceptors, readMaxBytes: config.limits.maxBodyBytes },
  });
  const rest = createRestHandler({ revisions, transport, maxBodyBytes: config.limits.maxBodyBytes });
  let openApiDoc: unknown;
  const openApi = (): unknown => (openApiDoc ??= buildOpenApi(revisions));

  const fallback = (req: Req, res: Res): void => {
    void (async () => {
      try {
        if (await rest(req, res)) return;
        const path = (req.url ?? "/").split("?")[0];
        if (req.method === "GET" && path === "/healthz") return sendJson(res, 200, { status: "ok" });
        if (req.method === "GET" && path === "/openapi.json") return sendJson(res, 200, openApi());
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

  const handler = connectNodeAdapter({
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
    ready,
    async close() {
      await Promise.allSettled([db.close(), storage?.close()]);
    },
  };
}
