// Runs query plans: pages with signed keyset cursors, counts, and bounded
// batches for exports (a server-side cursor on PostgreSQL, keyset reads at a
// pinned point on PGlite, whose single connection a long transaction would block).
import { createHash } from "node:crypto";
import { grantsKey, seesEverything, type Grants } from "../../access/index.js";
import { invalidArgument } from "../../errors.js";
import { stampMicros } from "../../time.js";
import type { Db, Queryable } from "../db.js";
import { toStoredResource, type ResourceRow } from "../sql.js";
import type { StoredResource } from "../types.js";
import { countStatement, pageStatement, type Keyset, type ReadPoint } from "./compile.js";
import { readerFor } from "../replicas.js";
import { loadCursorSecret } from "../cursor-secret.js";
import { createCursorCodec, type CursorCodec, type CursorState } from "./cursor.js";
import type { QueryPlan } from "./plan.js";

export interface QueryRow extends ResourceRow {
  __k: string | null;
  __t: string;
}

interface PageRequest {
  /** Parsed as_of (rpc/as-of.ts); unset = now, or the cursor's point. */
  readonly asOf?: string | undefined;
  readonly cursor?: string | undefined;
  /** Rows wanted; unset = all (streams) or the default page (pages). */
  readonly limit?: number | undefined;
}

interface Page {
  readonly resources: StoredResource[];
  readonly nextCursor: string | undefined;
}

/** Every method reads only what `grants` may see (docs/contract/18-access.md). */
export interface QueryEngine {
  page(plan: QueryPlan, grants: Grants, request: PageRequest & { readonly limit: number }): Promise<Page>;
  count(plan: QueryPlan, grants: Grants, asOf: string | undefined): Promise<bigint>;
  /** Calls onBatch with consecutive batches in query order; stops early when it throws. */
  forEachBatch(
    plan: QueryPlan,
    grants: Grants,
    request: PageRequest,
    batchSize: number,
    onBatch: (rows: QueryRow[]) => Promise<void>,
  ): Promise<void>;
  /**
   * forEachBatch's rows, with the select list `select` over the row `r` in
   * place of the resource columns, as one binary COPY stream (one statement,
   * one snapshot, access filtered in its SQL); undefined when the database
   * cannot COPY out (PGlite), where forEachBatch is the way.
   */
  copyRows(
    plan: QueryPlan,
    grants: Grants,
    request: PageRequest,
    select: string,
  ): Promise<AsyncIterable<Uint8Array> | undefined>;
}

/**
 * The identity a cursor is bound to: the query's, and, for restricted
 * grants, the grants too. A cursor taken by one caller and replayed by a
 * caller with other grants is refused as one of another query (400), so a
 * page never continues under grants other than those of the first page;
 * every page also applies the replaying caller's grants in its SQL.
 */
function cursorHash(plan: QueryPlan, grants: Grants): string {
  if (seesEverything(grants)) return plan.hash;
  return createHash("sha256").update(plan.hash).update("\0").update(grantsKey(grants)).digest("base64url");
}

export interface QueryEngineOptions {
  /** config.cursorSecret; unset = the one kept in the database. */
  readonly cursorSecret?: string | undefined;
}

/** The stamp a read point names; undefined = now. */
const stampOf = (point: ReadPoint): string | undefined =>
  point.kind === "now" ? undefined : point.kind === "as_of" ? point.asOf : point.at;

export function createQueryEngine(db: Db, options: QueryEngineOptions = {}): QueryEngine {
  const primary = db;
  let codec: Promise<CursorCodec> | undefined;
  const getCodec = () => {
    codec ??= loadCursorSecret(db, options.cursorSecret).then(createCursorCodec, (err: unknown) => {
      codec = undefined;
      throw err;
    });
    return codec;
  };

  async function start(
    plan: QueryPlan,
    grants: Grants,
    req: PageRequest,
  ): Promise<{ point: ReadPoint; after?: Keyset; asOf?: string | undefined }> {
    if (req.cursor === undefined || req.cursor === "") {
      return { point: req.asOf !== undefined ? { kind: "as_of", asOf: req.asOf } : { kind: "now" }, asOf: req.asOf };
    }
    const state = (await getCodec()).decode(req.cursor, cursorHash(plan, grants));
    // The pinned point, or the as_of that pinned it (they differ when that as_of lay in the future).
    if (req.asOf !== undefined) {
      const given = stampMicros(req.asOf);
      if (
        given === undefined ||
        (given !== stampMicros(state.at) && (state.asOf === undefined || given !== stampMicros(state.asOf)))
      ) {
        throw invalidArgument("as_of differs from the read point of the cursor", "INVALID_CURSOR");
      }
    }
    return { point: { kind: "pinned", at: state.at }, after: state.after, asOf: state.asOf };
  }

  const keyOf = (row: QueryRow): Keyset => ({ value: row.__k, identifier: row.identifier });

  /** Runs one statement where the read point allows: a standby that has replayed it, or the primary (replicas.ts). */
  const run = async <T>(point: ReadPoint, fn: (q: Queryable) => Promise<T>): Promise<T> =>
    fn(await readerFor(db, stampOf(point)));

  return {
    async page(plan, grants, req) {
      const { point, after, asOf } = await start(plan, grants, req);
      const { rows } = await run(point, (q) => {
        const st = pageStatement(plan, point, grants, { ...(after ? { after } : {}), limit: req.limit + 1 });
        // One name per query shape, while the database names shapes (prepared.ts).
        return q.query<QueryRow>(primary.statementNames?.page(st.sql) ?? st.sql, st.params);
      });
      let nextCursor: string | undefined;
      if (rows.length > req.limit) {
        rows.length = req.limit;
        const last = rows[rows.length - 1] as QueryRow;
        const state: CursorState = { at: last.__t, after: keyOf(last), hash: cursorHash(plan, grants), asOf };
        nextCursor = (await getCodec()).encode(state);
      }
      return { resources: rows.map((r) => toStoredResource(r, false)), nextCursor };
    },

    async count(plan, grants, asOf) {
      const point: ReadPoint = asOf !== undefined ? { kind: "as_of", asOf } : { kind: "now" };
      const { rows } = await run(point, (q) => {
        const st = countStatement(plan, point, grants);
        return q.query<{ n: string }>(st.sql, st.params);
      });
      return BigInt(rows[0]?.n ?? "0");
    },

    async copyRows(plan, grants, req, select) {
      const { point, after } = await start(plan, grants, req);
      const db = await readerFor(primary, stampOf(point));
      if (db.copyOut === undefined) return undefined;
      const st = pageStatement(plan, point, grants, {
        ...(after ? { after } : {}),
        ...(req.limit !== undefined ? { limit: req.limit } : {}),
        select,
      });
      return db.copyOut(st.sql, st.params);
    },

    async forEachBatch(plan, grants, req, batchSize, onBatch) {
      const { point, after } = await start(plan, grants, req);
      let remaining = req.limit ?? Number.POSITIVE_INFINITY;
      const db = await readerFor(primary, stampOf(point));
      if (db.capabilities.streamedBatches) {
        // One statement, one snapshot: a server-side cursor hands it out in batches.
        const st = pageStatement(plan, point, grants, {
          ...(after ? { after } : {}),
          ...(req.limit !== undefined ? { limit: req.limit } : {}),
        });
        await db.transaction(async (tx) => {
          await tx.query(`DECLARE query_export NO SCROLL CURSOR FOR ${st.sql}`, st.params);
          for (;;) {
            const { rows } = await tx.query<QueryRow>(`FETCH ${batchSize} FROM query_export`);
            if (rows.length === 0) break;
            await onBatch(rows);
            if (rows.length < batchSize) break;
          }
          await tx.query("CLOSE query_export");
        });
        return;
      }
      // Keyset batches; after the first, every batch reads the history at the first one's point.
      let at = point;
      let key = after;
      while (remaining > 0) {
        const limit = Math.min(batchSize, remaining);
        const st = pageStatement(plan, at, grants, { ...(key ? { after: key } : {}), limit });
        const { rows } = await db.query<QueryRow>(st.sql, st.params);
        if (rows.length === 0) break;
        const last = rows[rows.length - 1] as QueryRow;
        at = { kind: "pinned", at: last.__t };
        key = keyOf(last);
        remaining -= rows.length;
        await onBatch(rows);
        if (rows.length < limit) break;
      }
    },
  };
}
