// SchemaService: the JSON Schemas of the payload types. The same handler
// serves resourcestore.v1 and resourcestore.v2 (both list only Schemas).
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { SchemasResponseSchema } from "../../gen/resourcestore/type/v1/schema_pb.js";
import type { SchemaService } from "../../gen/resourcestore/v2/schema_service_pb.js";
import { payloadJsonSchemas } from "../schema/json-schema.js";

export type SchemaServiceImpl = ServiceImpl<typeof SchemaService>;

export function createSchemaService(): SchemaServiceImpl {
  return {
    schemas() {
      // protobuf-es represents google.protobuf.Struct fields as plain JSON
      // objects. A copy, because the computed schemas are shared and frozen
      // and a response may be touched by interceptors downstream.
      return create(SchemasResponseSchema, { schemas: structuredClone(payloadJsonSchemas()) });
    },
  };
}
