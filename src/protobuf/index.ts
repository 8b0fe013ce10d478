// Protobuf binary encoding by a plan per message type (planned-binary.ts):
// the same bytes as protobuf-es's toBinary, several times faster. Used by
// the server for its answers and by the client library for its requests;
// it depends on nothing of either. Decoding by the same kind of plan
// (planned-from-binary.ts): the same message as fromBinary, for the
// server's binary requests.
export {
  createPlannedBinaryInterceptor,
  createPlannedRequestInterceptor,
  encodedMessage,
  plannedToBinary,
} from "./planned-binary.js";
export { decodesByPlan, plannedFromBinary } from "./planned-from-binary.js";
