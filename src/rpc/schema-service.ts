// SchemaService: the JSON Schemas of the payload types. The same handler
// serves resourcestore.v1 and resourcestore.v2 (both list only Schemas).
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { SchemasResponseSchema, type SchemasResponse } from "../../gen/resourcestore/type/v1/schema_pb.js";
import type { SchemaService } from "../../gen/resourcestore/v2/schema_service_pb.js";
import { payloadJsonSchemas } from "../schema/json-schema.js";

export type SchemaServiceImpl = ServiceImpl<typeof SchemaService>;

export function createSchemaService(): SchemaServiceImpl {
  // protobuf-es represents google.protobuf.Struct fields as plain JSON
  // objects. One copy, made on the first call (the computed schemas are shared
  // and frozen), then frozen itself: the schemas cannot change while the
  // process runs, so every call answers the same message.
  let response: SchemasResponse | undefined;
  return {
    schemas() {
      response ??= deepFreeze(create(SchemasResponseSchema, { schemas: structuredClone(payloadJsonSchemas()) }));
      return response;
    },
  };
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}
