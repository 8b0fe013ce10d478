// The TypeScript client: the generated Connect clients of one revision over
// the transport of your choice, with an optional bearer token and an
// optional default `as_of` injected into every read that does not set its
// own (README, "Calling it"; docs/time.md for as_of).
import type { DescMessage, DescService } from "@bufbuild/protobuf";
import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { AdminService } from "../../gen/resourcestore/v1/admin_service_pb.js";
import { ArtefactService } from "../../gen/resourcestore/v1/artefact_service_pb.js";
import * as v1Lineage from "../../gen/resourcestore/v1/lineage_service_pb.js";
import * as v1Query from "../../gen/resourcestore/v1/query_service_pb.js";
import * as v1Registry from "../../gen/resourcestore/v1/registry_service_pb.js";
import * as v1Resource from "../../gen/resourcestore/v1/resource_service_pb.js";
import * as v1Schema from "../../gen/resourcestore/v1/schema_service_pb.js";
import * as v1Stats from "../../gen/resourcestore/v1/stats_service_pb.js";
import * as v1Storage from "../../gen/resourcestore/v1/storage_service_pb.js";
import * as v2Lineage from "../../gen/resourcestore/v2/lineage_service_pb.js";
import * as v2Query from "../../gen/resourcestore/v2/query_service_pb.js";
import * as v2Registry from "../../gen/resourcestore/v2/registry_service_pb.js";
import * as v2Resource from "../../gen/resourcestore/v2/resource_service_pb.js";
import * as v2Schema from "../../gen/resourcestore/v2/schema_service_pb.js";
import * as v2Stats from "../../gen/resourcestore/v2/stats_service_pb.js";
import * as v2Storage from "../../gen/resourcestore/v2/storage_service_pb.js";
import * as v1Event from "../../gen/resourcestore/v1/event_service_pb.js";
import * as v2Event from "../../gen/resourcestore/v2/event_service_pb.js";
import { createPlannedRequestInterceptor } from "../protobuf/index.js";
import { historyPages, watchEvents, type HistoryParams, type WatchParams } from "./browser.js";
import { withPlannedAnswers } from "./planned-answers.js";

export * from "./browser.js";

export type TransportKind = "connect" | "grpc" | "grpc-web";

export interface ClientOptions {
  /** e.g. http://localhost:8080 */
  readonly baseUrl: string;
  /** Connect (JSON over HTTP/1.1) by default. */
  readonly transport?: TransportKind;
  /** Sent as `Authorization: Bearer <token>`. */
  readonly token?: string;
  /** RFC 3339 read point put into every read that does not set `as_of` (nor a cursor). */
  readonly asOf?: string;
  /**
   * Extra interceptors, run after the client's own. With any, gRPC and
   * gRPC-Web answers are decoded by connect (reflection) rather than by plan,
   * so that the interceptors see them as messages (planned-answers.ts).
   */
  readonly interceptors?: readonly Interceptor[];
  /**
   * Ask the server to compress its answers (gzip or brotli), for slow links.
   * Off by default: near the server, compressing and inflating a read of
   * 100 resources cost more time than sending its ~20 KB
   * (docs/benchmarks/read.md, "the read path").
   */
  readonly compression?: boolean;
}

function hasField(desc: DescMessage, name: string): boolean {
  return desc.fields.some((f) => f.name === name);
}

/** Sets `as_of` on requests that have the field, leave it unset, and carry no cursor (a cursor pins its own read point). */
export function defaultAsOfInterceptor(asOf: string): Interceptor {
  const inject = <M>(message: M): M => {
    const m = message as { asOf?: string; cursor?: string };
    if (m.asOf !== undefined || (m.cursor !== undefined && m.cursor !== "")) return message;
    return { ...message, asOf };
  };
  return (next) => async (req) => {
    if (!hasField(req.method.input, "as_of")) return next(req);
    if (!req.stream) return next({ ...req, message: inject(req.message) });
    const source = req.message;
    return next({
      ...req,
      message: (async function* () {
        for await (const m of source) yield inject(m);
      })(),
    });
  };
}

export function bearerInterceptor(token: string): Interceptor {
  return (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
}

export function createTransport(opts: ClientOptions): Transport {
  const interceptors: Interceptor[] = [];
  if (opts.token !== undefined) interceptors.push(bearerInterceptor(opts.token));
  if (opts.asOf !== undefined) interceptors.push(defaultAsOfInterceptor(opts.asOf));
  interceptors.push(...(opts.interceptors ?? []));
  // connect-node's default accepts gzip and brotli; without `compression` the client accepts neither.
  const compression = opts.compression === true ? {} : { acceptCompression: [] };
  // On the binary wires requests are encoded by plan, innermost so the interceptors above see the message.
  const binary = [...interceptors, createPlannedRequestInterceptor()];
  // And answers decoded by plan, unless an interceptor of the caller's might look at them (planned-answers.ts).
  const answers = (t: Transport): Transport => ((opts.interceptors ?? []).length === 0 ? withPlannedAnswers(t) : t);
  switch (opts.transport ?? "connect") {
    case "grpc":
      return answers(createGrpcTransport({ baseUrl: opts.baseUrl, interceptors: binary, ...compression }));
    case "grpc-web":
      return answers(
        createGrpcWebTransport({ baseUrl: opts.baseUrl, httpVersion: "1.1", interceptors: binary, ...compression }),
      );
    case "connect":
      return createConnectTransport({ baseUrl: opts.baseUrl, httpVersion: "1.1", interceptors, ...compression });
  }
}

function clientsOf<S extends Record<string, DescService>>(
  services: S,
  transport: Transport,
): { [K in keyof S]: Client<S[K]> } {
  const out: Record<string, unknown> = {};
  for (const [k, svc] of Object.entries(services)) out[k] = createClient(svc, transport);
  return out as { [K in keyof S]: Client<S[K]> };
}

/**
 * Clients of the second revision (the default), `watch()`: the change feed,
 * resumed by itself after a dropped connection, and `history(identifier)`:
 * a resource's versions, page by page.
 */
export function createResourceStoreClient(opts: ClientOptions) {
  const transport = createTransport(opts);
  return {
    ...clientsOf(
      {
        resources: v2Resource.ResourceService,
        query: v2Query.QueryService,
        lineage: v2Lineage.LineageService,
        registry: v2Registry.RegistryService,
        stats: v2Stats.StatsService,
        schemas: v2Schema.SchemaService,
        storage: v2Storage.StorageService,
        events: v2Event.EventService,
      },
      transport,
    ),
    watch: (params?: WatchParams) => watchEvents(transport, params),
    history: (identifier: string, params?: HistoryParams) => historyPages(transport, identifier, params),
  };
}

/** Clients of the first revision. */
export function createResourceStoreClientV1(opts: ClientOptions) {
  return clientsOf(
    {
      resources: v1Resource.ResourceService,
      query: v1Query.QueryService,
      lineage: v1Lineage.LineageService,
      registry: v1Registry.RegistryService,
      artefacts: ArtefactService,
      stats: v1Stats.StatsService,
      schemas: v1Schema.SchemaService,
      storage: v1Storage.StorageService,
      admin: AdminService,
      events: v1Event.EventService,
    },
    createTransport(opts),
  );
}

export type ResourceStoreClient = ReturnType<typeof createResourceStoreClient>;
export type ResourceStoreClientV1 = ReturnType<typeof createResourceStoreClientV1>;
