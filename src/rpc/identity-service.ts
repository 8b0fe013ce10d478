// IdentityService.WhoAmI (docs/contract/12-authentication.md): the caller as
// the pipeline resolved it, its actor, scopes and grants, never the
// credential. The same handler serves resourcestore.v1 and v2.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { CallerGrantsSchema, WhoAmIResponseSchema } from "../../gen/resourcestore/type/v1/identity_pb.js";
import type { IdentityService } from "../../gen/resourcestore/v2/identity_service_pb.js";
import { callerOf, credentialsKey } from "../auth/index.js";

export function createIdentityService(): ServiceImpl<typeof IdentityService> {
  return {
    whoAmI(_req, ctx) {
      const { actor, grants, expiresAt } = callerOf(ctx);
      const { scopes, checked } = ctx.values.get(credentialsKey);
      return create(WhoAmIResponseSchema, {
        actor,
        scopes: [...scopes],
        grants: create(CallerGrantsSchema, {
          allDatasources: grants.datasources === "all",
          datasources: grants.datasources === "all" ? [] : [...grants.datasources].sort(),
          clearance: grants.clearance,
        }),
        authenticated: checked,
        // RFC 3339 UTC with microseconds, as every stamp the API writes (docs/contract/01-resources.md).
        ...(expiresAt === undefined ? {} : { expiresAt: new Date(expiresAt).toISOString().replace("Z", "000Z") }),
      });
    },
  };
}
