// ArtefactService (resourcestore.v1 only).
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { LatestResponseSchema } from "../../gen/resourcestore/type/v1/artefact_pb.js";
import type { ArtefactService } from "../../gen/resourcestore/v1/artefact_service_pb.js";
import { callerOf } from "../auth/index.js";
import { notFound } from "../errors.js";
import { latestArtefact, readerFor } from "../store/index.js";
import type { Db } from "../store/index.js";
import { optionalAsOf } from "./as-of.js";
import { toResourceMessage } from "./resource-service.js";

export interface ArtefactServiceDeps {
  readonly db: Db;
}

export function createArtefactService(deps: ArtefactServiceDeps): ServiceImpl<typeof ArtefactService> {
  const { db } = deps;
  return {
    async latest(req, ctx) {
      const { grants } = callerOf(ctx);
      const asOf = optionalAsOf(req.asOf);
      const found = await latestArtefact(await readerFor(db, asOf), grants, {
        repo: req.repo,
        branch: req.branch,
        path: req.path,
        ...(asOf !== undefined ? { asOf } : {}),
      });
      if (!found) throw notFound(`no succeeded artefact for ${req.repo} ${req.branch} ${req.path}`);
      return create(LatestResponseSchema, { resource: toResourceMessage(found) });
    },
  };
}
