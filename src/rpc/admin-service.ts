// AdminService (resourcestore.v1 only). Admin scope is enforced by the auth
// interceptor, not here.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { RefreshMaterializedViewsResponseSchema } from "../../gen/resourcestore/type/v1/lineage_pb.js";
import type { AdminService } from "../../gen/resourcestore/v1/admin_service_pb.js";
import type { Db } from "../store/index.js";
import { hasLineageView, refreshLineageView } from "../store/index.js";

export interface AdminServiceDeps {
  readonly db: Db;
}

export function createAdminService(deps: AdminServiceDeps): ServiceImpl<typeof AdminService> {
  const { db } = deps;
  return {
    async refreshMaterializedViews() {
      if (!hasLineageView(db)) {
        return create(RefreshMaterializedViewsResponseSchema, {
          message: "nothing to refresh: the embedded store has no materialized views",
        });
      }
      // Waits for a refresh already running elsewhere, then refreshes: the
      // answer means the view holds every write committed before the call.
      await refreshLineageView(db, { wait: true });
      return create(RefreshMaterializedViewsResponseSchema, { message: "refreshed materialized view lineage_closure" });
    },
  };
}
