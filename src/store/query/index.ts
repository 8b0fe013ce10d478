// The query engine: QueryRequest -> plan -> parameterized SQL -> pages, counts and export batches.
export { planQuery, MAX_LIMIT, OPS, type QueryPlan, type FilterNode, type Op } from "./plan.js";
export { pageStatement, countStatement, HEAD_WALK_FACTOR, type ReadPoint, type Keyset, type Statement } from "./compile.js";
export { createCursorCodec, type CursorCodec, type CursorState } from "./cursor.js";
export { createQueryEngine, cursorHash, type QueryEngine, type QueryRow, type Page, type PageRequest } from "./engine.js";
export { descendantsCte, type RowSource } from "./descendants.js";
export { resolveField, queryMetadataNames, type QueryField, type SqlType } from "./fields.js";
