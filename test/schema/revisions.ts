// The services of each revision, straight from the generated files, in the
// order the server would list them (v1, then v2).
import type { DescFile, DescService } from "@bufbuild/protobuf";
import { file_resourcestore_v1_admin_service } from "../../gen/resourcestore/v1/admin_service_pb.js";
import { file_resourcestore_v1_artefact_service } from "../../gen/resourcestore/v1/artefact_service_pb.js";
import { file_resourcestore_v1_lineage_service } from "../../gen/resourcestore/v1/lineage_service_pb.js";
import { file_resourcestore_v1_query_service } from "../../gen/resourcestore/v1/query_service_pb.js";
import { file_resourcestore_v1_registry_service } from "../../gen/resourcestore/v1/registry_service_pb.js";
import { file_resourcestore_v1_resource_service } from "../../gen/resourcestore/v1/resource_service_pb.js";
import { file_resourcestore_v1_schema_service } from "../../gen/resourcestore/v1/schema_service_pb.js";
import { file_resourcestore_v1_stats_service } from "../../gen/resourcestore/v1/stats_service_pb.js";
import { file_resourcestore_v1_storage_service } from "../../gen/resourcestore/v1/storage_service_pb.js";
import { file_resourcestore_v2_lineage_service } from "../../gen/resourcestore/v2/lineage_service_pb.js";
import { file_resourcestore_v2_query_service } from "../../gen/resourcestore/v2/query_service_pb.js";
import { file_resourcestore_v2_registry_service } from "../../gen/resourcestore/v2/registry_service_pb.js";
import { file_resourcestore_v2_resource_service } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { file_resourcestore_v2_schema_service } from "../../gen/resourcestore/v2/schema_service_pb.js";
import { file_resourcestore_v2_stats_service } from "../../gen/resourcestore/v2/stats_service_pb.js";
import { file_resourcestore_v2_storage_service } from "../../gen/resourcestore/v2/storage_service_pb.js";

const servicesOf = (files: readonly DescFile[]): DescService[] => files.flatMap((f) => f.services);

export const revisions: readonly { name: string; services: readonly DescService[] }[] = [
  {
    name: "v1",
    services: servicesOf([
      file_resourcestore_v1_admin_service,
      file_resourcestore_v1_artefact_service,
      file_resourcestore_v1_lineage_service,
      file_resourcestore_v1_query_service,
      file_resourcestore_v1_registry_service,
      file_resourcestore_v1_resource_service,
      file_resourcestore_v1_schema_service,
      file_resourcestore_v1_stats_service,
      file_resourcestore_v1_storage_service,
    ]),
  },
  {
    name: "v2",
    services: servicesOf([
      file_resourcestore_v2_lineage_service,
      file_resourcestore_v2_query_service,
      file_resourcestore_v2_registry_service,
      file_resourcestore_v2_resource_service,
      file_resourcestore_v2_schema_service,
      file_resourcestore_v2_stats_service,
      file_resourcestore_v2_storage_service,
    ]),
  },
];
