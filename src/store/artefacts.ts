// The latest succeeded artefact of a repo, branch and path, now or at as_of.
import type { Grants } from "../access/index.js";
import { invalidArgument } from "../errors.js";
import type { Queryable } from "./db.js";
import { resourceColumns, toStoredResource, type ResourceRow } from "./sql.js";
import type { StoredResource } from "./types.js";
import { andVisible, visibleAt, visibleNow } from "./visibility.js";

export interface LatestArtefactQuery {
  readonly repo: string;
  readonly branch: string;
  readonly path: string;
  /** A checked read point (rpc/as-of.ts); now when absent. */
  readonly asOf?: string;
}

// "Created last" is created_at (a create over a tombstone counts as new);
// artefacts of one batch share it, and the greatest identifier wins then.
const MATCH = `r.payload_type = 'artefact' AND r.payload->>'status' = 'succeeded' AND NOT r.is_deleted
  AND r.payload->>'repo' = $1 AND r.payload->>'branch' = $2 AND r.payload->>'path' = $3`;

/** The artefact, or undefined when none matches among those the caller may see. */
export async function latestArtefact(
  db: Queryable,
  grants: Grants,
  query: LatestArtefactQuery,
): Promise<StoredResource | undefined> {
  for (const [name, value] of [
    ["repo", query.repo],
    ["branch", query.branch],
    ["path", query.path],
  ] as const) {
    if (value === "") throw invalidArgument(`${name} is required`);
  }
  const params: unknown[] = [query.repo, query.branch, query.path];
  let sql: string;
  if (query.asOf === undefined) {
    sql = `SELECT ${resourceColumns("r")} FROM resources r WHERE ${MATCH}${andVisible(visibleNow(grants, "r"))}
           ORDER BY r.created_at DESC, r.identifier DESC LIMIT 1`;
  } else {
    // The read point as every as_of read takes it: least(as_of, committed clock).
    sql = `WITH p AS (SELECT least($4::timestamptz, last) AS t FROM clock)
           SELECT ${resourceColumns("r")} FROM p JOIN resource_history r ON r.tx_from <= p.t AND r.tx_to > p.t
            WHERE ${MATCH}${andVisible(visibleAt(grants, "r", "p.t"))}
            ORDER BY r.created_at DESC, r.identifier DESC LIMIT 1`;
    params.push(query.asOf);
  }
  const { rows } = await db.query<ResourceRow>(sql, params);
  const row = rows[0];
  return row === undefined ? undefined : toStoredResource(row, false);
}
