// The OpenAPI 3.1 document of the REST surface, read off the descriptors: the
// google.api.http rules give the operations, the messages give the schemas
// (in the REST JSON shape the gateway speaks), the payload registry gives the
// flat resource. Nothing here is written per operation or per message.
import { getOption, hasOption, ScalarType } from "@bufbuild/protobuf";
import type { DescField, DescMessage, DescMethod, JsonObject, JsonValue } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { FieldBehavior, field_behavior } from "../../gen/google/api/field_behavior_pb.js";
import { rules } from "../../gen/resourcestore/type/v1/options_pb.js";
import { ResourceSchema, ResourceUpdateSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { readHttpRules } from "./http-rules.js";
import type { HttpOperation, Revision } from "./http-rules.js";
import { fieldJsonSchema } from "./json-schema.js";
import { isNullable, payloadTypes } from "./payload-registry.js";
import type { PayloadType } from "./payload-registry.js";

type Direction = "input" | "output";

/** The flat shapes of Resource: as created, as read, as selected by a query. */
type ResourceFlavour = "input" | "output" | "selection";

const HTTP_BODY = "google.api.HttpBody";
const STRUCT = "google.protobuf.Struct";
const VALUE = "google.protobuf.Value";
const LIST_VALUE = "google.protobuf.ListValue";
const FIELD_MASK = "google.protobuf.FieldMask";

// A query may return only some columns (select_columns), so its results carry
// only identifier and payload_type for sure (docs/queries.md).
const SELECTION_FIELDS: ReadonlySet<string> = new Set(["resourcestore.type.v1.QueryResponse.results"]);

// `children` is present only in /resources/read answers (docs/resources.md).
const OCCASIONAL_METADATA: ReadonlySet<string> = new Set(["children"]);

const ERROR_RESPONSES: readonly (readonly [status: string, name: string, description: string])[] = [
  ["400", "BadRequest", "invalid_argument or failed_precondition"],
  ["401", "Unauthenticated", "unauthenticated: no or bad credentials"],
  ["403", "PermissionDenied", "permission_denied: credentials without the needed scope"],
  ["404", "NotFound", "not_found: missing resource or object, or an operation absent from the revision"],
  ["413", "PayloadTooLarge", "resource_exhausted: body over the limit"],
  ["500", "Internal", "internal"],
  ["503", "Unavailable", "unavailable: storage unreachable"],
];

const ref = (name: string): JsonObject => ({ $ref: `#/components/schemas/${name}` });

function isRequired(field: DescField): boolean {
  return hasOption(field, field_behavior) && getOption(field, field_behavior).includes(FieldBehavior.REQUIRED);
}

function isOutputOnly(field: DescField): boolean {
  return hasOption(field, field_behavior) && getOption(field, field_behavior).includes(FieldBehavior.OUTPUT_ONLY);
}

/** Fields that REST JSON always writes: implicit presence, lists, maps, and nullables (as null). */
function alwaysWritten(field: DescField): boolean {
  if (isNullable(field) || field.fieldKind === "list" || field.fieldKind === "map") return true;
  return field.fieldKind !== "message" && field.presence === FeatureSet_FieldPresence.IMPLICIT;
}

/** Adds null to a schema's accepted values. */
function orNull(schema: JsonObject): JsonObject {
  const type = schema["type"];
  if (typeof type === "string") return { ...schema, type: [type, "null"] };
  if (Array.isArray(type)) return type.includes("null") ? schema : { ...schema, type: [...type, "null"] };
  return { anyOf: [schema, { type: "null" }] };
}

function scalarSchema(scalar: ScalarType): JsonObject {
  switch (scalar) {
    case ScalarType.STRING:
      return { type: "string" };
    case ScalarType.BYTES:
      return { type: "string", contentEncoding: "base64" };
    case ScalarType.BOOL:
      return { type: "boolean" };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return { type: "number" };
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { type: "integer", format: "int32" };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return { type: "integer", minimum: 0, maximum: 4294967295 };
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      // Outside payloads the gateway writes counts as JSON numbers.
      return { type: "integer", minimum: 0, format: "int64" };
    default:
      return { type: "integer", format: "int64" };
  }
}

/** A string field's value rules (pattern, enum, format) from the custom option. */
function withRules(field: DescField, schema: JsonObject): JsonObject {
  if (schema["type"] !== "string" || !hasOption(field, rules)) return schema;
  const r = getOption(field, rules);
  const out: JsonObject = { ...schema };
  if (r.oneOf.length > 0) out["enum"] = [...r.oneOf];
  if (r.pattern !== "") out["pattern"] = r.pattern;
  if (r.format !== "") out["format"] = r.format;
  return out;
}

/** Builds components/schemas as the operations reach messages. */
function createSchemaBuilder() {
  const schemas: JsonObject = {};
  const names = new Map<string, string>();
  const outputMessages = new Set<string>();

  function collectOutput(message: DescMessage): void {
    if (outputMessages.has(message.typeName)) return;
    outputMessages.add(message.typeName);
    for (const field of message.fields) if (field.message) collectOutput(field.message);
  }

  // A message used both ways gets a second schema for requests: responses
  // require the fields they always write, requests do not.
  function componentName(message: DescMessage, direction: Direction): string {
    const name = direction === "input" && outputMessages.has(message.typeName) ? `${message.name}Input` : message.name;
    const owner = names.get(name);
    if (owner !== undefined && owner !== message.typeName) {
      throw new Error(`${owner} and ${message.typeName} map to the OpenAPI schema name ${name}`);
    }
    names.set(name, message.typeName);
    return name;
  }

  function valueSchema(field: DescField, direction: Direction): JsonObject | undefined {
    switch (field.fieldKind) {
      case "scalar":
        return withRules(field, scalarSchema(field.scalar));
      case "enum":
        return { type: "string", enum: field.enum.values.map((v) => v.name) };
      case "message":
        return messageSchema(field.message, direction, field);
      case "list": {
        const items =
          field.listKind === "scalar"
            ? withRules(field, scalarSchema(field.scalar))
            : field.listKind === "enum"
              ? { type: "string", enum: field.enum.values.map((v) => v.name) }
              : messageSchema(field.message, direction, field);
        return items === undefined ? undefined : { type: "array", items };
      }
      case "map": {
        const values =
          field.mapKind === "scalar"
            ? scalarSchema(field.scalar)
            : field.mapKind === "enum"
              ? { type: "string", enum: field.enum.values.map((v) => v.name) }
              : messageSchema(field.message, direction, field);
        return values === undefined ? undefined : { type: "object", additionalProperties: values };
      }
    }
  }

  /** A field's schema as it sits in a message, null included when it may be. */
  function propertySchema(field: DescField, direction: Direction): JsonObject | undefined {
    const schema = valueSchema(field, direction);
    if (schema === undefined) return undefined;
    return isNullable(field) ? orNull(schema) : schema;
  }

  /** The schema (or a $ref) of a message; undefined when REST does not expose it. */
  function messageSchema(message: DescMessage, direction: Direction, via?: DescField): JsonObject | undefined {
    switch (message.typeName) {
      case STRUCT:
        return { type: "object" };
      case VALUE:
        return {};
      case LIST_VALUE:
        return { type: "array" };
      case FIELD_MASK:
        return undefined;
      case HTTP_BODY:
        return { type: "string", contentMediaType: "application/octet-stream" };
      case ResourceSchema.typeName: {
        const flavour: ResourceFlavour =
          direction === "input"
            ? "input"
            : via && SELECTION_FIELDS.has(via.parent.typeName + "." + via.name)
              ? "selection"
              : "output";
        return resourceSchema(flavour);
      }
      case ResourceUpdateSchema.typeName:
        return resourceUpdateSchema();
      default:
        break;
    }
    const name = componentName(message, direction);
    if (!(name in schemas)) {
      schemas[name] = {}; // placeholder: messages may refer to themselves
      schemas[name] = objectSchema(message, direction, new Set());
    }
    return ref(name);
  }

  function objectSchema(message: DescMessage, direction: Direction, without: ReadonlySet<string>): JsonObject {
    const properties: JsonObject = {};
    const required: string[] = [];
    for (const field of message.fields) {
      if (without.has(field.name) || (direction === "input" && isOutputOnly(field))) continue;
      const schema = propertySchema(field, direction);
      if (schema === undefined) continue;
      properties[field.name] = schema;
      if (direction === "input" ? isRequired(field) : alwaysWritten(field)) required.push(field.name);
    }
    const out: JsonObject = { type: "object", properties };
    if (required.length > 0) out["required"] = required;
    out["additionalProperties"] = false;
    return out;
  }

  function payloadProperties(payload: PayloadType, nullableFields: boolean): JsonObject {
    const properties: JsonObject = {};
    for (const field of payload.fields) {
      const schema = fieldJsonSchema(field);
      // A required payload field cannot be cleared (docs/resources.md).
      properties[field.name] = nullableFields && !field.required ? orNull(schema) : schema;
    }
    return properties;
  }

  function resourceSchema(flavour: ResourceFlavour): JsonObject {
    const base = { input: "ResourceInput", output: "Resource", selection: "QueryResult" }[flavour];
    if (base in schemas) return ref(base);
    schemas[base] = {};
    const metadata = ResourceSchema.fields.filter(
      (f) => f.oneof === undefined && !(flavour === "input" && isOutputOnly(f)),
    );
    const variants: JsonObject[] = [];
    const mapping: JsonObject = {};
    for (const payload of payloadTypes.values()) {
      const properties: JsonObject = {};
      for (const field of metadata) {
        const schema = propertySchema(field, flavour === "input" ? "input" : "output");
        if (schema !== undefined) properties[field.name] = schema;
      }
      properties["payload_type"] = { type: "string", const: payload.name };
      Object.assign(properties, payloadProperties(payload, false));
      const required =
        flavour === "input"
          ? [...metadata.filter(isRequired).map((f) => f.name), "payload_type"]
          : flavour === "output"
            ? [...metadata.filter((f) => !OCCASIONAL_METADATA.has(f.name)).map((f) => f.name), "payload_type"]
            : [...metadata.filter(isRequired).map((f) => f.name), "payload_type"];
      if (flavour !== "selection") required.push(...payload.fields.filter((f) => f.required).map((f) => f.name));
      const variant = `${base}${payload.message.name}`;
      schemas[variant] = { type: "object", properties, required, additionalProperties: false };
      variants.push(ref(variant));
      mapping[payload.name] = `#/components/schemas/${variant}`;
    }
    schemas[base] = {
      description: "A resource in the flat REST shape: metadata, payload_type and the payload fields side by side.",
      oneOf: variants,
      discriminator: { propertyName: "payload_type", mapping },
    };
    return ref(base);
  }

  function resourceUpdateSchema(): JsonObject {
    const base = "ResourceUpdate";
    if (base in schemas) return ref(base);
    schemas[base] = {};
    // Message-typed fields (payload_fields, update_mask) carry the flat keys
    // over gRPC; over REST those keys sit at the top level instead.
    const metadata = ResourceUpdateSchema.fields.filter((f) => f.oneof === undefined && f.fieldKind !== "message");
    const variants: JsonObject[] = [];
    for (const payload of payloadTypes.values()) {
      const properties: JsonObject = {};
      for (const field of metadata) {
        const schema = valueSchema(field, "input");
        if (schema !== undefined) properties[field.name] = orNull(schema);
      }
      properties["payload_type"] = { type: "string", const: payload.name };
      Object.assign(properties, payloadProperties(payload, true));
      const variant = `${base}${payload.message.name}`;
      schemas[variant] = { type: "object", properties, additionalProperties: false };
      variants.push(ref(variant));
    }
    schemas[base] = {
      description:
        "A change to one resource: only the keys present change, null clears. The payload fields are those of the stored payload type (named by payload_type when given).",
      anyOf: variants,
    };
    return ref(base);
  }

  return { schemas, collectOutput, valueSchema, messageSchema, objectSchema };
}

/** `/a/{name=things/*}:verb` -> OpenAPI path and the field paths bound in it. */
function openApiPath(template: string): { path: string; params: string[] } {
  const params: string[] = [];
  const path = template.replace(/\{([^}=]+)(?:=[^}]*)?\}/g, (_, name: string) => {
    params.push(name);
    return `{${name}}`;
  });
  return { path, params };
}

function fieldNamed(message: DescMessage, name: string): DescField {
  const field = message.fields.find((f) => f.name === name);
  if (!field) throw new Error(`${message.typeName} has no field ${name} named by its http rule`);
  return field;
}

function errorSchema(): JsonObject {
  const codes = Object.values(Code)
    .filter((c): c is Code => typeof c === "number")
    .map((c) => codeToString(c));
  return {
    type: "object",
    properties: {
      code: { type: "string", enum: codes },
      message: { type: "string" },
      reason: {
        type: "string",
        pattern: "^[A-Z][A-Z0-9_]*$",
        description: "The stable reason of the error catalogue (docs/errors.md).",
      },
    },
    required: ["code", "message", "reason"],
  };
}

export function buildOpenApi(revisions: readonly Revision[]): JsonObject {
  const builder = createSchemaBuilder();
  const methods = revisions.flatMap((r) => r.services.flatMap((s) => s.methods));
  for (const method of methods) builder.collectOutput(method.output);

  function operation(method: DescMethod, binding: HttpOperation, operationId: string): JsonObject {
    const { params } = openApiPath(binding.template);
    const input = method.input;
    const parameters: JsonValue[] = params.map((name) => ({
      name,
      in: "path",
      required: true,
      schema: builder.valueSchema(fieldNamed(input, name), "input") ?? {},
    }));
    const bound = new Set(params);
    if (binding.body !== "*") {
      for (const field of input.fields) {
        if (bound.has(field.name) || field.name === binding.body || field.fieldKind === "message") continue;
        if (field.fieldKind === "map") continue;
        const schema = builder.valueSchema(field, "input");
        if (schema !== undefined) parameters.push({ name: field.name, in: "query", required: false, schema });
      }
    }
    const op: JsonObject = {
      operationId,
      tags: [method.parent.name],
      summary: `${method.parent.typeName}.${method.name}`,
    };
    if (parameters.length > 0) op["parameters"] = parameters;
    if (binding.body !== "") {
      const schema =
        binding.body === "*"
          ? bound.size === 0
            ? builder.messageSchema(input, "input")
            : builder.objectSchema(input, "input", bound)
          : builder.valueSchema(fieldNamed(input, binding.body), "input");
      op["requestBody"] = {
        required: input.fields.length > 0,
        content: { "application/json": { schema: schema ?? {} } },
      };
    }
    const responses: JsonObject = {};
    if (method.output.typeName === HTTP_BODY) {
      responses["200"] = {
        description: "The bytes, streamed.",
        content: {
          "application/octet-stream": { schema: { type: "string", contentMediaType: "application/octet-stream" } },
        },
      };
    } else {
      const schema =
        binding.responseBody === ""
          ? builder.messageSchema(method.output, "output")
          : builder.valueSchema(fieldNamed(method.output, binding.responseBody), "output");
      responses["200"] = { description: "OK", content: { "application/json": { schema: schema ?? {} } } };
    }
    for (const [status, name] of ERROR_RESPONSES) responses[status] = { $ref: `#/components/responses/${name}` };
    op["responses"] = responses;
    return op;
  }

  const paths: Record<string, JsonObject> = {};
  const put = (path: string, verb: string, op: JsonObject): void => {
    paths[path] ??= {};
    paths[path][verb] = op;
  };
  // Each revision's operations are built first, but the union's paths come
  // first in the document.
  const { operations } = readHttpRules(revisions);
  const built = operations.map((op) => {
    const { parent, name } = op.method;
    const id = op.revision === undefined ? `${parent.name}.${name}` : `${op.revision}.${parent.name}.${name}`;
    return { op, path: openApiPath(op.template).path, verb: op.verb.toLowerCase(), id };
  });
  const prefixed = built
    .filter((b) => b.op.revision !== undefined)
    .map((b) => ({ ...b, doc: operation(b.op.method, b.op, b.id) }));
  for (const b of built) if (b.op.revision === undefined) put(b.path, b.verb, operation(b.op.method, b.op, b.id));
  for (const b of prefixed) put(b.path, b.verb, b.doc);

  const responses: JsonObject = {};
  for (const [, name, description] of ERROR_RESPONSES) {
    responses[name] = { description, content: { "application/json": { schema: ref("Error") } } };
  }
  builder.schemas["Error"] = errorSchema();

  return {
    openapi: "3.1.0",
    info: {
      title: "Resource store",
      version: revisions.map((r) => r.name).join("+"),
      description:
        "The REST surface: unprefixed paths serve the union of the revisions, /<revision>/... one revision strictly.",
    },
    servers: [{ url: "/" }],
    paths,
    components: { schemas: builder.schemas, responses },
  };
}
