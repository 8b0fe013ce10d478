// The query engine: QueryRequest -> plan -> parameterized SQL -> pages, counts and export batches.
export { planQuery, MAX_LIMIT, OPS, type QueryPlan } from "./plan.js";
export { pageStatement, countStatement, HEAD_WALK_FACTOR, type ReadPoint } from "./compile.js";
export { createCursorCodec, type CursorCodec } from "./cursor.js";
export { createQueryEngine, type QueryEngine, type QueryRow } from "./engine.js";
export { resolveField, queryMetadataNames, type QueryField, type SqlType } from "./fields.js";
