// Which statement texts go to PostgreSQL as named prepared statements, and
// under which names. A named statement is prepared once per connection and
// then only bound and executed: the server parses it once, not on every
// call, and after five runs plans it once too when a generic plan costs no
// more than the plans made for the values.
//
// Two kinds of text are named:
// - fixed texts whose plan does not hinge on the values (key lookups): the
//   store's modules declare them with `prepared` where they define them, at
//   load, like their functions (nothing is added while the service runs);
// - generated page texts of queries, one per query shape: the database names
//   the first MAX_PREPARED_PAGES it sends, so a client inventing shapes
//   cannot grow the names without end.
// The names themselves belong to the opened database (openDatabase hands one
// table to the primary and its standbys), not to the process: two databases
// opened in one process (tests, benchmarks) each name their own shapes.

/** Fixed texts the store's modules declared at load (see `prepared`). */
const declared = new Set<string>();

/** Declares a fixed statement text to be sent as a named prepared statement on PostgreSQL. Returns the text. */
export function prepared(sql: string): string {
  declared.add(sql);
  return sql;
}

/** How many generated page texts one database names; later ones run unnamed. */
export const MAX_PREPARED_PAGES = 100;

export interface StatementNames {
  /** The name `sql` is sent under, naming a declared fixed text on first use; undefined = sent unnamed. */
  nameOf(sql: string): string | undefined;
  /**
   * Names a generated page statement of a query (one query shape: its
   * filters, sort, read point, whether it continues a cursor; every value,
   * the limit included, is a parameter) while fewer than MAX_PREPARED_PAGES
   * are named: the server then skips parsing and analysing it on every
   * later call, about a fifth of its CPU for a page of 20 (docs/benchmarks/load.md,
   * "Round eight"). Returns the text.
   */
  page(sql: string): string;
}

export function createStatementNames(maxPages = MAX_PREPARED_PAGES): StatementNames {
  const names = new Map<string, string>();
  let pages = 0;
  const name = (sql: string): string => {
    let n = names.get(sql);
    if (n === undefined) {
      n = `rs_${names.size + 1}`;
      names.set(sql, n);
    }
    return n;
  };
  return {
    nameOf: (sql) => names.get(sql) ?? (declared.has(sql) ? name(sql) : undefined),
    page(sql) {
      if (!names.has(sql) && !declared.has(sql) && pages < maxPages) {
        pages++;
        name(sql);
      }
      return sql;
    },
  };
}

/**
 * A generated statement text, named as the database names query shapes (the
 * first MAX_PREPARED_PAGES texts; StatementNames.page): parsed once per
 * connection, not on every call. For the texts of the tree listings and the
 * statistics, which differ by grants and read state (docs/benchmarks/load.md, "Load against prepared floors": those lines
 * against a floor that prepares every statement). Unnamed on a database
 * without names (PGlite).
 */
export function named(db: { readonly statementNames?: StatementNames | undefined }, sql: string): string {
  return db.statementNames?.page(sql) ?? sql;
}
