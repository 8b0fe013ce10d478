// The REST transcoder: routes from google.api.http, the flat resource codec,
// the one status table.
export { createRestHandler } from "./handler.js";
export type { RestOptions } from "./handler.js";
export type { RestRevision } from "./routes.js";
export { restStatus, writeRestError } from "./status.js";
export {
  flatResourceToProtoJson,
  flatUpdateToProtoJson,
  resourceToFlat,
  updateToFlat,
} from "./flat-codec.js";
export type { FlatWriteOptions } from "./flat-codec.js";
