// RegistryService handlers, the same in resourcestore.v1 and v2.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  RegisterPatientResponseSchema,
  RegisterStudyResponseSchema,
  ResolvePatientResponseSchema,
  ResolveStudyResponseSchema,
} from "../../gen/resourcestore/type/v1/registry_pb.js";
import type { RegistryService } from "../../gen/resourcestore/v2/registry_service_pb.js";
import { callerOf } from "../auth/index.js";
import type { Registry } from "../store/index.js";

export interface RegistryServiceDeps {
  /** createRegistry({db, keys: await loadRegistryKeys(...)}) */
  readonly registry: Registry;
}

export function createRegistryService(deps: RegistryServiceDeps): ServiceImpl<typeof RegistryService> {
  const { registry } = deps;
  return {
    registerPatient: async (req, ctx) => {
      const { grants } = callerOf(ctx);
      return create(RegisterPatientResponseSchema, {
        identifier: await registry.registerPatient(grants, req.datasourceId, req.externalUid),
      });
    },
    resolvePatient: async (req, ctx) => {
      const { grants } = callerOf(ctx);
      return create(ResolvePatientResponseSchema, {
        identifier: await registry.resolvePatient(grants, req.datasourceId, req.externalUid),
      });
    },
    registerStudy: async (req, ctx) => {
      const { grants } = callerOf(ctx);
      return create(RegisterStudyResponseSchema, {
        identifier: await registry.registerStudy(grants, req.patientIdentifier, req.externalUid),
      });
    },
    resolveStudy: async (req, ctx) => {
      const { grants } = callerOf(ctx);
      return create(ResolveStudyResponseSchema, {
        identifier: await registry.resolveStudy(grants, req.patientIdentifier, req.externalUid),
      });
    },
  };
}
