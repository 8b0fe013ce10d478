// The REST transcoder: routes from google.api.http and the one status table
// (the flat resource codec it speaks is the schema's: src/schema/flat-codec.ts).
export { createRestHandler, requestTarget } from "./handler.js";
export { buildRouteTable, findRoute, type RouteTable } from "./routes.js";
export type { Revision } from "../schema/http-rules.js";
export { restStatus, writeRestError } from "../http/error-status.js";
export { matchPathTemplate, parsePathTemplate } from "./path-template.js";
export { decodeRestRequest } from "./request-decoder.js";
