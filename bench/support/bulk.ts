// Millions of resources in seconds: set-based SQL in the shape the store
// writes (resources, an empty history since nothing was replaced yet, and the
// clock at the last stamp), 1,000 resources a stamp as if written in batches of
// 1,000. Secondary indexes are dropped during the load and rebuilt from their
// own definitions, as a bulk load would; statistics are refreshed after.
import type pg from "pg";
import { connect } from "./database.js";

export const BULK_PREFIX = "q";

async function secondaryIndexes(c: pg.Client): Promise<{ name: string; def: string }[]> {
  const { rows } = await c.query<{ name: string; def: string }>(
    `SELECT i.indexname AS name, i.indexdef AS def FROM pg_indexes i
      WHERE i.schemaname = 'public' AND i.tablename IN ('resources', 'resource_versions')
        AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conname = i.indexname)`,
  );
  return rows;
}

/** Adds files `from`..`to`-1 (`from` a multiple of 1,000,000, after every earlier load) (no parent; content types as workload.ts) to a migrated database. */
export async function bulkLoadFiles(url: string, from: number, to: number): Promise<void> {
  const c = await connect(url);
  try {
    await c.query("SET maintenance_work_mem = '512MB'");
    const indexes = await secondaryIndexes(c);
    for (const ix of indexes) await c.query(`DROP INDEX ${ix.name}`);
    const step = 1_000_000;
    for (let lo = from; lo < to; lo += step) {
      const hi = Math.min(to, lo + step) - 1;
      await c.query(
        `INSERT INTO resources (identifier, payload_type, parent_identifier, license, access_level, derived_from,
            payload, created_at, updated_at, version, is_deleted, deleted_by, actor)
         SELECT '${BULK_PREFIX}-f' || i, 'file', NULL, NULL, 'internal', '{}',
            jsonb_build_object('path', 's3://resources/bulk/' || (i / 1000) || '/' || i || '.dcm',
              'size_bytes', (500000 + (i % 1000) * 17)::text,
              'content_type', (ARRAY['application/dicom', 'application/dicom', 'application/dicom', 'image/png', 'application/json'])[i % 5 + 1],
              'sha256', md5(i::text) || md5((i + 1)::text)),
            s, s, 1, false, NULL, 'bench'
           FROM generate_series($1::bigint, $2::bigint) AS i,
                LATERAL (SELECT timestamptz '2026-01-01T00:00:00Z' + (i / 1000) * interval '1 millisecond' AS s) AS t`,
        [lo, hi],
      );
    }
    for (const ix of indexes) await c.query(ix.def);
    await c.query("UPDATE clock SET last = greatest(last, (SELECT max(updated_at) FROM resources))");
    await c.query("VACUUM ANALYZE resources");
    await c.query("VACUUM ANALYZE resource_versions");
  } finally {
    await c.end();
  }
}
