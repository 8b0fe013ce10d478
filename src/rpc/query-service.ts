// QueryService handlers, shared by resourcestore.v1 and resourcestore.v2.
// Requests become plans (store/query), pages become Resource messages with
// only the selected columns, and QueryParquet streams one parquet file.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { HttpBodySchema } from "../../gen/google/api/httpbody_pb.js";
import type { Resource } from "../../gen/resourcestore/type/v1/resource_pb.js";
import {
  CountResponseSchema,
  QueryResponseSchema,
  type QueryRequest,
} from "../../gen/resourcestore/type/v1/query_pb.js";
import type { QueryService } from "../../gen/resourcestore/v2/query_service_pb.js";
import { callerOf } from "../auth/index.js";
import { invalidArgument } from "../errors.js";
import {
  createEncoderPool,
  createExportGate,
  exportColumns,
  parquetExport,
  type EncoderPool,
} from "../parquet/index.js";
import { defaultEncoderWorkers } from "../config.js";
import type { Db, StoredResource } from "../store/index.js";
import { createQueryEngine, MAX_LIMIT, planQuery, type QueryPlan } from "../store/index.js";
import { optionalAsOf } from "./as-of.js";
import { toResourceMessage } from "./resource-service.js";
import { resetTransport } from "./transport-reset.js";

export interface QueryServiceDeps {
  readonly db: Db;
  /** config.cursorSecret; unset = generated once and kept in the database. */
  readonly cursorSecret?: string | undefined;
  /** Rows a database fetch hands the parquet encoder (default 10,000). */
  readonly exportBatchRows?: number;
  /** Bytes per streamed parquet chunk (default 1 MiB). */
  readonly chunkBytes?: number;
  /** The largest page `limit`, also the page size without one (config MAX_QUERY_LIMIT; default 10,000). */
  readonly maxLimit?: number;
  /** Sees internal failures of a parquet stream (the client only sees "internal error"). */
  readonly onError?: (err: unknown) => void;
  /** config MAX_FILTER_DEPTH (default 8). */
  readonly maxFilterDepth?: number;
  /** MAX_CONCURRENT_EXPORTS / EXPORT_QUEUE_MS / EXPORT_STALL_MS; without them exports are not limited. */
  readonly exports?: { readonly max: number; readonly queueMs: number; readonly stallMs: number };
  /**
   * The process's encoder workers (app.ts makes one pool and closes it on
   * shutdown). Without it the service makes its own of the default size on
   * the first export; idle workers do not keep the process alive.
   */
  readonly encoders?: EncoderPool;
}

const PARQUET_CONTENT_TYPE = "application/octet-stream";

function checkLimit(limit: number | undefined, max: number): number | undefined {
  if (limit !== undefined && (limit < 1 || limit > max)) {
    throw invalidArgument(`limit must be between 1 and ${max}, got ${limit}`, "LIMIT_OUT_OF_RANGE");
  }
  return limit;
}

/** The Resource message with only identifier, payload_type and the selected fields. */
function selectedMessage(row: StoredResource, plan: QueryPlan): Resource {
  if (!plan.select) return toResourceMessage(row);
  const names = new Set(plan.select.map((f) => f.name));
  const payload = Object.fromEntries(Object.entries(row.payload).filter(([k]) => names.has(k)));
  const msg = toResourceMessage({ ...row, payload });
  if (!names.has("parent_identifier")) msg.parentIdentifier = undefined;
  if (!names.has("license")) msg.license = undefined;
  if (!names.has("access_level")) msg.accessLevel = undefined;
  if (!names.has("derived_from")) msg.derivedFrom = [];
  if (!names.has("created_at")) msg.createdAt = "";
  if (!names.has("updated_at")) msg.updatedAt = "";
  if (!names.has("version")) msg.version = 0n;
  return msg;
}

export function createQueryService(deps: QueryServiceDeps): ServiceImpl<typeof QueryService> {
  const engine = createQueryEngine(deps.db, { cursorSecret: deps.cursorSecret });
  const maxLimit = deps.maxLimit ?? MAX_LIMIT;
  const plan = (req: Parameters<typeof planQuery>[0]) =>
    planQuery(req, { ...(deps.maxFilterDepth !== undefined ? { maxFilterDepth: deps.maxFilterDepth } : {}) });
  const gate = deps.exports ? createExportGate(deps.exports.max, deps.exports.queueMs) : undefined;
  let ownPool: EncoderPool | undefined;
  const encoders = (): EncoderPool => deps.encoders ?? (ownPool ??= createEncoderPool(defaultEncoderWorkers()));
  const request = (req: QueryRequest) => ({
    plan: plan(req),
    asOf: optionalAsOf(req.asOf),
    limit: checkLimit(req.limit, maxLimit),
  });

  return {
    async query(req, ctx) {
      const { grants } = callerOf(ctx);
      const { plan, asOf, limit } = request(req);
      const page = await engine.page(plan, grants, { asOf, cursor: req.cursor, limit: limit ?? maxLimit });
      return create(QueryResponseSchema, {
        results: page.resources.map((r) => selectedMessage(r, plan)),
        ...(page.nextCursor !== undefined ? { nextCursor: page.nextCursor } : {}),
        ...(limit !== undefined ? { limit } : {}),
      });
    },

    async count(req, ctx) {
      const { grants } = callerOf(ctx);
      const count = await engine.count(plan(req), grants, optionalAsOf(req.asOf));
      return create(CountResponseSchema, { count });
    },

    async *queryParquet(req, ctx) {
      const { grants } = callerOf(ctx);
      const { plan, asOf, limit } = request(req);
      const batchRows = deps.exportBatchRows ?? 10_000;
      // One slot per export, held until it ends (or is cut for stalling).
      const release = gate ? await gate.acquire(ctx.signal) : () => undefined;
      // A stalled client is past telling (its error would queue behind the
      // bytes it does not read): its slot is freed and its stream reset.
      const onStall = () => {
        release();
        ctx.values.get(resetTransport)?.();
      };
      try {
        const chunks = parquetExport({
          columns: exportColumns(plan),
          encoders: encoders(),
          produce: (write) => engine.forEachBatch(plan, grants, { asOf, cursor: req.cursor, limit }, batchRows, write),
          copy: (select) => engine.copyRows(plan, grants, { asOf, cursor: req.cursor, limit }, select),
          ...(deps.chunkBytes !== undefined ? { chunkBytes: deps.chunkBytes } : {}),
          ...(deps.onError ? { onError: deps.onError } : {}),
          ...(deps.exports ? { stallMs: deps.exports.stallMs, onStall } : {}),
        });
        for await (const data of chunks) yield create(HttpBodySchema, { contentType: PARQUET_CONTENT_TYPE, data });
      } finally {
        release();
      }
    },
  };
}
