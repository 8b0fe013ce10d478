// Every version of one resource, oldest first (docs/contract/19-audit-history.md):
// the rows of resource_history for one identifier, by version. One statement
// per page: whether the caller may see the identifier now, and the page.
//
// - `at` is the version's tx_from: the stamp of the commit that wrote it.
// - `kind` comes from the version before it (the rule the change feed uses,
//   store/events.ts): none before, or a tombstone before and a new
//   created_at (a create over a tombstone), is `created`; a tombstone is
//   `deleted`; a live version after a tombstone with the old created_at is
//   `restored`; anything else `updated`. The version before is taken by a
//   window (lag) over the versions from the cursor's on (the cursor's own
//   version precedes the page's first; versions are numbered without gaps),
//   before the range and visibility filters, so a version's kind is the same
//   on every page and for every caller. One ordered scan of the primary
//   keys: joining each version to the one before it scanned the history
//   twice and took twice as long (bench history-page, docs/benchmarks/history-and-audit.md).
// - `since` is inclusive and `until` exclusive, on `at` ([since, until), as
//   every period of the store).
// - Pages are keyed by version; the cursor is the query cursor's signed
//   token (store/query/cursor.ts), bound to the identifier and the range by
//   its hash, so it cannot be replayed against another resource.
//
// Access (docs/contract/18-access.md): a caller sees a version when the
// grants admit both the version (its access_level and its datasource as the
// tree was at its `at`) and the resource as it is now; when they do not admit
// the resource now, the identifier answers 404 as one never created. The
// predicates are the store's own (visibility.ts), as every read uses.
import { createHash } from "node:crypto";
import type { Grants } from "../access/index.js";
import { ALL_GRANTS, seesEverything } from "../access/index.js";
import { invalidArgument, notFound } from "../errors.js";
import { checkIdentifier } from "../schema/validate.js";
import type { Queryable } from "./db.js";
import { prepared } from "./prepared.js";
import type { CursorCodec } from "./query/index.js";
import { resourceColumns, toStoredResource, ts, type ResourceRow } from "./sql.js";
import { andVisible, visibleAt, visibleNow } from "./visibility.js";
import type { StoredResource } from "./types.js";

type VersionKind = "created" | "updated" | "deleted" | "restored";

export interface HistoryVersion {
  version: number;
  /** The commit's stamp, RFC 3339 UTC with microseconds. */
  at: string;
  actor: string;
  kind: VersionKind;
  /** The resource as it read at `at` (a deleted version: its tombstone's content); no children. */
  resource: StoredResource;
}

export interface VersionPage {
  readonly versions: HistoryVersion[];
  /** Undefined exactly when no version follows (in the range, as the caller may see it). */
  readonly nextCursor: string | undefined;
}

/** The signing of history cursors: the query cursor codec, loaded when first needed. */
export type HistoryCursor = () => Promise<CursorCodec>;

export interface HistoryOptions {
  /** Parsed RFC 3339 (time.ts parseAsOf); only versions at or after it. */
  readonly since?: string | undefined;
  /** Parsed RFC 3339; only versions before it. */
  readonly until?: string | undefined;
  /** Versions per page, 1 or more (the caller bounds it by MAX_QUERY_LIMIT). */
  readonly limit?: number | undefined;
  /** The next_cursor of the previous page. */
  readonly cursor?: string | undefined;
}

const DEFAULT_HISTORY_LIMIT = 100;

type HistoryRow = Partial<ResourceRow> & { at: string | null; actor: string | null; kind: VersionKind | null };

/** The page's statement; for grants that do not see everything, with the store's visibility predicates (visibility.ts). */
function historySql(grants: Grants): string {
  return `WITH cur AS (
      SELECT r.identifier FROM resources r
       WHERE r.identifier = $1::text${andVisible(visibleNow(grants, "r"))}
    )
    SELECT h.* FROM cur LEFT JOIN LATERAL (
      SELECT ${ts("v.tx_from")} AS at, v.actor,
             CASE WHEN v.before_deleted IS NULL THEN 'created'
                  WHEN v.is_deleted THEN 'deleted'
                  WHEN v.before_deleted THEN CASE WHEN v.created_at = v.tx_from THEN 'created' ELSE 'restored' END
                  ELSE 'updated' END AS kind,
             ${resourceColumns("v")}
        FROM (SELECT w.*, lag(w.is_deleted) OVER (ORDER BY w.version) AS before_deleted
                FROM resource_history w
               WHERE w.identifier = cur.identifier AND w.version >= $2::bigint) v
       WHERE v.version > $2::bigint
         AND v.tx_from >= $3::timestamptz AND v.tx_from < $4::timestamptz
         ${andVisible(visibleAt(grants, "v", "v.tx_from"))}
       ORDER BY v.version
       LIMIT $5
    ) h ON true`;
}

// The unrestricted page is one shape for every call: prepared once per connection.
const HISTORY_ALL = prepared(historySql(ALL_GRANTS));

/** Ties a cursor to its identifier and range. */
function rangeHash(identifier: string, since: string | undefined, until: string | undefined): string {
  return createHash("sha256")
    .update(JSON.stringify(["history", identifier, since ?? null, until ?? null]))
    .digest("base64url");
}

export async function readHistory(
  db: Queryable,
  codec: HistoryCursor,
  identifier: string,
  grants: Grants,
  options: HistoryOptions = {},
): Promise<VersionPage> {
  checkIdentifier(identifier);
  const limit = options.limit ?? DEFAULT_HISTORY_LIMIT;
  if (!Number.isSafeInteger(limit) || limit < 1)
    throw invalidArgument(`limit must be 1 or more, got ${limit}`, "LIMIT_OUT_OF_RANGE");
  const hash = rangeHash(identifier, options.since, options.until);
  let after = 0;
  if (options.cursor !== undefined && options.cursor !== "") {
    const state = (await codec()).decode(options.cursor, hash);
    after = Number(state.after.value);
    if (!Number.isSafeInteger(after) || after < 0 || state.after.identifier !== identifier)
      throw invalidArgument("cursor is invalid", "INVALID_CURSOR");
  }
  const params: unknown[] = [identifier, after, options.since ?? "-infinity", options.until ?? "infinity", limit + 1];
  const { rows } = await db.query<HistoryRow>(seesEverything(grants) ? HISTORY_ALL : historySql(grants), params);
  if (rows.length === 0) throw notFound(`resource ${JSON.stringify(identifier)} not found`);
  const versions: HistoryVersion[] = [];
  for (const r of rows) {
    if (r.at === null || r.kind === null || r.actor === null || r.identifier === undefined) continue;
    versions.push({
      version: Number(r.version),
      at: r.at,
      actor: r.actor,
      kind: r.kind,
      resource: toStoredResource(r as ResourceRow, false),
    });
  }
  let nextCursor: string | undefined;
  if (versions.length > limit) {
    versions.length = limit;
    const last = versions[limit - 1] as HistoryVersion;
    nextCursor = (await codec()).encode({ at: last.at, after: { value: String(last.version), identifier }, hash });
  }
  return { versions, nextCursor };
}
