// The two revisions of the surface, each with only its own services and
// operations. Order matters: for an operation in both, the last revision
// serves the unprefixed REST path.
import type { DescService } from "@bufbuild/protobuf";
import type { Revision } from "../schema/http-rules.js";
import { AdminService } from "../../gen/resourcestore/v1/admin_service_pb.js";
import { ArtefactService } from "../../gen/resourcestore/v1/artefact_service_pb.js";
import { IdentityService as IdentityServiceV1 } from "../../gen/resourcestore/v1/identity_service_pb.js";
import { EventService as EventServiceV1 } from "../../gen/resourcestore/v1/event_service_pb.js";
import { LineageService as LineageServiceV1 } from "../../gen/resourcestore/v1/lineage_service_pb.js";
import { QueryService as QueryServiceV1 } from "../../gen/resourcestore/v1/query_service_pb.js";
import { RegistryService as RegistryServiceV1 } from "../../gen/resourcestore/v1/registry_service_pb.js";
import { ResourceService as ResourceServiceV1 } from "../../gen/resourcestore/v1/resource_service_pb.js";
import { SchemaService as SchemaServiceV1 } from "../../gen/resourcestore/v1/schema_service_pb.js";
import { StatsService as StatsServiceV1 } from "../../gen/resourcestore/v1/stats_service_pb.js";
import { StorageService as StorageServiceV1 } from "../../gen/resourcestore/v1/storage_service_pb.js";
import { IdentityService as IdentityServiceV2 } from "../../gen/resourcestore/v2/identity_service_pb.js";
import { EventService as EventServiceV2 } from "../../gen/resourcestore/v2/event_service_pb.js";
import { LineageService as LineageServiceV2 } from "../../gen/resourcestore/v2/lineage_service_pb.js";
import { QueryService as QueryServiceV2 } from "../../gen/resourcestore/v2/query_service_pb.js";
import { RegistryService as RegistryServiceV2 } from "../../gen/resourcestore/v2/registry_service_pb.js";
import { ResourceService as ResourceServiceV2 } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { SchemaService as SchemaServiceV2 } from "../../gen/resourcestore/v2/schema_service_pb.js";
import { StatsService as StatsServiceV2 } from "../../gen/resourcestore/v2/stats_service_pb.js";
import { StorageService as StorageServiceV2 } from "../../gen/resourcestore/v2/storage_service_pb.js";

/** The unqualified service names shared by both revisions. */
export type ServiceName =
  | "ResourceService"
  | "QueryService"
  | "LineageService"
  | "RegistryService"
  | "ArtefactService"
  | "StatsService"
  | "SchemaService"
  | "StorageService"
  | "AdminService"
  | "EventService"
  | "IdentityService";

export type { Revision };

export const revisions: readonly Revision[] = [
  {
    name: "v1",
    services: [
      ResourceServiceV1,
      QueryServiceV1,
      LineageServiceV1,
      RegistryServiceV1,
      ArtefactService,
      StatsServiceV1,
      SchemaServiceV1,
      StorageServiceV1,
      AdminService,
      EventServiceV1,
      IdentityServiceV1,
    ],
  },
  {
    name: "v2",
    services: [
      ResourceServiceV2,
      QueryServiceV2,
      LineageServiceV2,
      RegistryServiceV2,
      StatsServiceV2,
      SchemaServiceV2,
      StorageServiceV2,
      EventServiceV2,
      IdentityServiceV2,
    ],
  },
];

export function serviceName(desc: DescService): ServiceName {
  return desc.name as ServiceName;
}
