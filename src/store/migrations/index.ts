// The ordered list of migrations. Adding one: a new numbered module that
// exports `sql`, plus one entry here. Applied ids are never edited.
import { sql as resources } from "./0001-resources.js";
import { sql as queryIndexes } from "./0002-query-indexes.js";

export interface Migration {
  readonly id: number;
  readonly name: string;
  readonly sql: string;
}

export const migrations: readonly Migration[] = [
  { id: 1, name: "resources", sql: resources },
  { id: 2, name: "query-indexes", sql: queryIndexes },
];
