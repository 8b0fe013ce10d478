// StatsService handlers, the same in resourcestore.v1 and v2.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  DatasourceDetailedStatsSchema,
  DatasourceStatsSchema,
  DetailedStatsResponseSchema,
  StatsResponseSchema,
} from "../../gen/resourcestore/type/v1/stats_pb.js";
import type { StatsService } from "../../gen/resourcestore/v2/stats_service_pb.js";
import { callerOf } from "../auth/index.js";
import { invalidArgument } from "../errors.js";
import { optionalAsOf } from "../time.js";
import type { Db } from "../store/index.js";
import { datasourceStats, readerFor } from "../store/index.js";

export interface StatsServiceDeps {
  readonly db: Db;
}

const bigints = (counts: Record<string, number>): Record<string, bigint> =>
  Object.fromEntries(Object.entries(counts).map(([k, v]) => [k, BigInt(v)]));

export function createStatsService(deps: StatsServiceDeps): ServiceImpl<typeof StatsService> {
  const { db } = deps;
  return {
    async stats(req, ctx) {
      const { grants } = callerOf(ctx);
      const asOf = optionalAsOf(req.asOf);
      const rows = await datasourceStats(await readerFor(db, asOf), grants, { asOf });
      return create(StatsResponseSchema, {
        datasources: rows.map((r) =>
          create(DatasourceStatsSchema, {
            datasourceId: r.datasourceId,
            patients: BigInt(r.patients),
            studies: BigInt(r.studies),
            resources: BigInt(r.resources),
          }),
        ),
      });
    },
    async detailedStats(req, ctx) {
      const { grants } = callerOf(ctx);
      // Only an absent datasource_id means every datasource; "" is malformed (as an empty as_of is).
      const only = req.datasourceId;
      if (only === "") throw invalidArgument("datasource_id is empty");
      const asOf = optionalAsOf(req.asOf);
      const rows = await datasourceStats(await readerFor(db, asOf), grants, {
        ...(only !== undefined ? { datasourceId: only } : {}),
        asOf,
      });
      return create(DetailedStatsResponseSchema, {
        datasources: rows.map((r) =>
          create(DatasourceDetailedStatsSchema, {
            datasourceId: r.datasourceId,
            patients: BigInt(r.patients),
            studies: BigInt(r.studies),
            resources: BigInt(r.resources),
            byPayloadType: bigints(r.byPayloadType),
            byAccessLevel: bigints(r.byAccessLevel),
            totalBytes: r.totalBytes,
            ...(r.lastUpdatedAt !== null ? { lastUpdatedAt: r.lastUpdatedAt } : {}),
          }),
        ),
      });
    },
  };
}
