// The REST transcoder: routes from google.api.http, the flat resource codec,
// the one status table.
export { createRestHandler, requestTarget } from "./handler.js";
export { buildRouteTable, findRoute, type RouteTable } from "./routes.js";
export type { RestOptions } from "./handler.js";
export type { Revision } from "../schema/http-rules.js";
export { restErrorOf, restStatus, writeRestError } from "./status.js";
export {
  flatResourceToProtoJson,
  flatUpdateToProtoJson,
  resourceToFlat,
  updateToFlat,
} from "./flat-codec.js";
export type { FlatWriteOptions } from "./flat-codec.js";
export { matchPathTemplate, parsePathTemplate, type PathBinding, type PathTemplate } from "./path-template.js";
export { decodeRestRequest, restToProtoJson, type RestRequestParts } from "./request-decoder.js";
