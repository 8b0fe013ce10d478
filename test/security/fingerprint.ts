// A digest of everything the store holds, so a test can prove that failed
// calls wrote nothing at all. Left out: the clock and the migration log.
// The tree counts are in: the writes keep them in their own transaction, so
// a failed call leaves them as they were too.
import type { Db } from "../../src/store/index.js";

const IGNORED = new Set(["clock", "schema_migrations"]);

export async function storeFingerprint(db: Db): Promise<string> {
  const { rows } = await db.query<{ tablename: string }>(
    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename",
  );
  const parts: string[] = [];
  for (const { tablename } of rows) {
    if (IGNORED.has(tablename)) continue;
    const ident = `"${tablename.replace(/"/g, '""')}"`;
    const r = await db.query<{ n: string; h: string | null }>(
      `SELECT count(*)::text AS n, md5(string_agg(t::text, '|' ORDER BY t::text)) AS h FROM ${ident} t`,
    );
    parts.push(`${tablename}:${r.rows[0]?.n}:${r.rows[0]?.h ?? "-"}`);
  }
  return parts.join(" ");
}
