// AdminService (resourcestore.v1 only). Admin scope is enforced by the auth
// interceptor, not here.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { RefreshMaterializedViewsResponseSchema } from "../../gen/resourcestore/type/v1/lineage_pb.js";
import type { AdminService } from "../../gen/resourcestore/v1/admin_service_pb.js";

/** The answer of RefreshMaterializedViews: the tree counts are kept by the writes, so there is never anything to refresh. */
export const NOTHING_TO_REFRESH = "nothing to refresh: the tree counts are kept by every write in its own transaction";

export function createAdminService(): ServiceImpl<typeof AdminService> {
  return {
    // Answers at once on every backend (issue 40): no view, no refresh.
    refreshMaterializedViews() {
      return Promise.resolve(create(RefreshMaterializedViewsResponseSchema, { message: NOTHING_TO_REFRESH }));
    },
  };
}
