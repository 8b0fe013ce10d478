// QueryService handlers, shared by resourcestore.v1 and resourcestore.v2.
// Requests become plans (store/query), pages become Resource messages with
// only the selected columns, and QueryParquet streams one parquet file.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { HttpBodySchema } from "../../gen/google/api/httpbody_pb.js";
import type { Resource } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { CountResponseSchema, QueryResponseSchema, type QueryRequest } from "../../gen/resourcestore/type/v1/query_pb.js";
import type { QueryService } from "../../gen/resourcestore/v2/query_service_pb.js";
import { invalidArgument } from "../errors.js";
import { exportColumns, parquetExport } from "../parquet/index.js";
import type { Db, StoredResource } from "../store/index.js";
import { createQueryEngine, MAX_LIMIT, planQuery, type QueryPlan } from "../store/query/index.js";
import { optionalAsOf } from "./as-of.js";
import { toResourceMessage } from "./resource-service.js";

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
}

const PARQUET_CONTENT_TYPE = "application/octet-stream";

function checkLimit(limit: number | undefined, max: number): number | undefined {
  if (limit !== undefined && (limit < 1 || limit > max)) {
    throw invalidArgument(`limit must be between 1 and ${max}, got ${limit}`);
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
  const request = (req: QueryRequest) => ({ plan: planQuery(req), asOf: optionalAsOf(req.asOf), limit: checkLimit(req.limit, maxLimit) });

  return {
    async query(req) {
      const { plan, asOf, limit } = request(req);
      const page = await engine.page(plan, { asOf, cursor: req.cursor, limit: limit ?? maxLimit });
      return create(QueryResponseSchema, {
        results: page.resources.map((r) => selectedMessage(r, plan)),
        ...(page.nextCursor !== undefined ? { nextCursor: page.nextCursor } : {}),
        ...(limit !== undefined ? { limit } : {}),
      });
    },

    async count(req) {
      const plan = planQuery(req);
      const count = await engine.count(plan, optionalAsOf(req.asOf));
      return create(CountResponseSchema, { count });
    },

    async *queryParquet(req) {
      let setup;
      setup = request(req);
      const { plan, asOf, limit } = setup;
      const batchRows = deps.exportBatchRows ?? 10_000;
      const chunks = parquetExport({
        columns: exportColumns(plan),
        produce: (write) => engine.forEachBatch(plan, { asOf, cursor: req.cursor, limit }, batchRows, write),
        ...(deps.chunkBytes !== undefined ? { chunkBytes: deps.chunkBytes } : {}),
        ...(deps.onError ? { onError: deps.onError } : {}),
      });
      for await (const data of chunks) yield create(HttpBodySchema, { contentType: PARQUET_CONTENT_TYPE, data });
    },
  };
}
