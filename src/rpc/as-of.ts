// The as_of read point: parsed in the neutral src/time.ts (the store needs it
// too); kept here under the names the services import.
export { optionalAsOf, parseAsOf } from "../time.js";
