// Reads by identifier, now or at an as_of read point, in one statement each
// (children included) so the answer is one consistent snapshot.
import { checkIdentifiers } from "../schema/validate.js";
import type { Grants } from "../access/index.js";
import type { Db, Queryable } from "./db.js";
import { prepared } from "./prepared.js";
import { resourceColumns, toStoredResource, type ResourceRow } from "./sql.js";
import type { ReadOptions, StoredResource } from "./types.js";
import { andVisible, visibleAt, visibleNow } from "./visibility.js";

const currentChildren = (visible = "") => `ARRAY(SELECT c.identifier FROM resources c
    WHERE c.parent_identifier = r.identifier AND NOT c.is_deleted${visible} ORDER BY c.created_at, c.identifier) AS children`;

// The read point is least(as_of, committed clock): a writer that holds the
// clock but has not committed stamps a later time, so it can never appear
// afterwards at a point already answered.
const asOfChildren = (visible = "") => `ARRAY(SELECT c.identifier FROM resource_history c
    WHERE c.parent_identifier = r.identifier AND NOT c.is_deleted AND c.tx_from <= p.t AND c.tx_to > p.t${visible}
    ORDER BY c.created_at, c.identifier) AS children`;

/** The read of identifiers $1 from `from`, with or without the children column; the columns as every read takes them. */
function readSql(from: string, children: string | undefined, visible = ""): string {
  return `SELECT ${resourceColumns("r")}${children !== undefined ? `, ${children}` : ""}
             ${from}
            WHERE r.identifier = ANY($1::text[]) AND NOT r.is_deleted${visible}`;
}

const CURRENT_FROM = "FROM resources r";
// The read point $2 only filters each identifier's versions.
const AS_OF_FROM = "FROM (SELECT $2::timestamptz AS t) p JOIN resource_history r ON r.tx_from <= p.t AND r.tx_to > p.t";

// Key lookups whatever the identifiers: prepared once per connection.
const READ_CURRENT = prepared(readSql(CURRENT_FROM, currentChildren()));
const READ_CURRENT_NO_CHILDREN = prepared(readSql(CURRENT_FROM, undefined));
const READ_POINT = prepared(`SELECT least($1::timestamptz, last)::text AS t FROM clock`);
const READ_AS_OF = prepared(readSql(AS_OF_FROM, asOfChildren()));
const READ_AS_OF_NO_CHILDREN = prepared(readSql(AS_OF_FROM, undefined));

/**
 * The four read statements for restricted grants: the same texts with the
 * visibility predicate on the rows read and on their children (API.md
 * section 18); prepared like the query pages, per distinct grants.
 */
function restrictedSql(db: Queryable, grants: Grants, asOf: boolean, withChildren: boolean): string | undefined {
  // Named like a query page while the database names shapes (prepared.ts).
  const preparedPage = (sql: string) => (db as Partial<Pick<Db, "statementNames">>).statementNames?.page(sql) ?? sql;
  if (asOf) {
    const at = visibleAt(grants, "r", "p.t");
    if (at === undefined) return undefined;
    const children = withChildren ? asOfChildren(andVisible(visibleAt(grants, "c", "p.t"))) : undefined;
    return preparedPage(readSql(AS_OF_FROM, children, andVisible(at)));
  }
  const now = visibleNow(grants, "r");
  if (now === undefined) return undefined;
  const children = withChildren ? currentChildren(andVisible(visibleNow(grants, "c"))) : undefined;
  return preparedPage(readSql(CURRENT_FROM, children, andVisible(now)));
}

export async function readResources(
  db: Queryable,
  grants: Grants,
  identifiers: readonly string[],
  options: ReadOptions = {},
): Promise<StoredResource[]> {
  checkIdentifiers(identifiers);
  const unique = [...new Set(identifiers)];
  if (unique.length === 0) return [];
  const withChildren = options.excludeChildren !== true;
  let sql: string;
  const params: unknown[] = [unique];
  if (options.asOf === undefined) {
    sql = restrictedSql(db, grants, false, withChildren) ?? (withChildren ? READ_CURRENT : READ_CURRENT_NO_CHILDREN);
  } else {
    // The read point first, as a value: joined in as a parameter of the
    // statement (least(as_of, clock.last)) the planner cannot estimate it and
    // may walk a time index of the history instead of the keys (measured 6x
    // slower for 100 identifiers). Every version stamped at or before the
    // committed clock was committed before it was read, so the second
    // statement sees exactly the state at that point.
    const { rows: point } = await db.query<{ t: string }>(READ_POINT, [options.asOf]);
    sql = restrictedSql(db, grants, true, withChildren) ?? (withChildren ? READ_AS_OF : READ_AS_OF_NO_CHILDREN);
    params.push(point[0]?.t ?? options.asOf);
    const { rows } = await db.query<ResourceRow>(sql, params);
    return inOrder(identifiers, rows, withChildren);
  }
  const { rows } = await db.query<ResourceRow>(sql, params);
  return inOrder(identifiers, rows, withChildren);
}

function inOrder(
  identifiers: readonly string[],
  rows: readonly ResourceRow[],
  withChildren: boolean,
): StoredResource[] {
  const byId = new Map(rows.map((row) => [row.identifier, toStoredResource(row, withChildren)]));
  const out: StoredResource[] = [];
  for (const id of identifiers) {
    const r = byId.get(id);
    // Repeats get their own copy so a caller mutating one does not change another.
    if (r) out.push(out.includes(r) ? structuredClone(r) : r);
  }
  return out;
}
