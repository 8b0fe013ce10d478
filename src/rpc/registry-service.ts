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
import type { Registry } from "../store/index.js";

export interface RegistryServiceDeps {
  /** createRegistry({db, keys: await loadRegistryKeys(...)}) */
  readonly registry: Registry;
}

export function createRegistryService(deps: RegistryServiceDeps): ServiceImpl<typeof RegistryService> {
  const { registry } = deps;
  return {
    registerPatient: async (req) =>
      create(RegisterPatientResponseSchema, { identifier: await registry.registerPatient(req.datasourceId, req.externalUid) }),
    resolvePatient: async (req) =>
      create(ResolvePatientResponseSchema, { identifier: await registry.resolvePatient(req.datasourceId, req.externalUid) }),
    registerStudy: async (req) =>
      create(RegisterStudyResponseSchema, { identifier: await registry.registerStudy(req.patientIdentifier, req.externalUid) }),
    resolveStudy: async (req) =>
      create(ResolveStudyResponseSchema, { identifier: await registry.resolveStudy(req.patientIdentifier, req.externalUid) }),
  };
}
