// Applies pending migrations at start-up. One transaction under an advisory
// lock, so several service processes starting on one database apply each
// migration exactly once.
import type { Db } from "./db.js";
import { migrations as defaultMigrations, type Migration } from "./migrations/index.js";

// An arbitrary constant naming "the schema migration lock" of this service.
const MIGRATION_LOCK_KEY = 7_362_918_001;

export async function migrate(db: Db, migrations: readonly Migration[] = defaultMigrations): Promise<number[]> {
  return db.transaction(async (tx) => {
    await tx.query("SELECT pg_advisory_xact_lock($1::bigint)", [MIGRATION_LOCK_KEY]);
    await tx.exec(
      "CREATE TABLE IF NOT EXISTS schema_migrations (id integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
    );
    const { rows } = await tx.query<{ id: number }>("SELECT id FROM schema_migrations");
    const done = new Set(rows.map((r) => Number(r.id)));
    const applied: number[] = [];
    for (const m of [...migrations].sort((a, b) => a.id - b.id)) {
      if (done.has(m.id)) continue;
      await tx.exec(m.sql);
      await tx.query("INSERT INTO schema_migrations (id, name) VALUES ($1, $2)", [m.id, m.name]);
      applied.push(m.id);
    }
    return applied;
  });
}
