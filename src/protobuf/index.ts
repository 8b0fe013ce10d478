// Protobuf binary encoding by a plan per message type (planned-binary.ts):
// the same bytes as protobuf-es's toBinary, several times faster. Used by
// the server for its answers and by the client library for its requests;
// it depends on nothing of either.
export { createPlannedBinaryInterceptor, createPlannedRequestInterceptor, encodedMessage, plannedToBinary } from "./planned-binary.js";
