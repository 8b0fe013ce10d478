// A Db that runs everything on the database it wraps and records every
// statement with its parameters (plain queries and those of transactions),
// for tests that explain what the store sent.
import type { Db, Queryable } from "../../src/store/index.js";

export interface Recorded {
  readonly sql: string;
  readonly params: readonly unknown[] | undefined;
}

export function recording(db: Db, out: Recorded[]): Db {
  const wrap = (q: Queryable): Queryable => ({
    query: (sql, params) => {
      out.push({ sql, params });
      return q.query(sql, params);
    },
    exec: (sql) => q.exec(sql),
  });
  return {
    kind: db.kind,
    capabilities: db.capabilities,
    ...wrap(db),
    transaction: (fn, options) => db.transaction((tx) => fn(wrap(tx)), options),
    ping: () => db.ping(),
    close: () => db.close(),
  };
}
