// Runs a store suite once per backend: PGlite in memory (from the run's image),
// and PostgreSQL in a fresh database of its own (skipped when unreachable,
// unless REQUIRE_POSTGRES=1).
import { afterAll, afterEach, beforeAll, describe } from "vitest";
import { createResourceStore, migrate, openDatabase, type Db, type ResourceStore } from "../../src/store/index.js";
import { openMemoryStore } from "../support/pglite-image.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";

export type BackendKind = "pglite" | "postgres";

export interface Backend {
  readonly kind: BackendKind;
  readonly db: Db;
  readonly store: ResourceStore;
  /** The PostgreSQL URL of this suite's database (postgres only). */
  readonly url: string | undefined;
}

const pgReachable = await postgresReachable();

let counter = 0;
/** A prefix unique in this worker, so tests sharing a database do not meet. */
export function uid(label = "t"): string {
  counter += 1;
  return `${label}${counter}x${Math.random().toString(36).slice(2, 7)}`;
}

export function describeBackends(
  name: string,
  suite: (backend: () => Backend) => void,
  kinds: readonly BackendKind[] = ["pglite", "postgres"],
): void {
  for (const kind of kinds) {
    describe.skipIf(kind === "postgres" && !pgReachable)(`${name} [${kind}]`, () => {
      let current: Backend | undefined;
      let testDb: TestDatabase | undefined;
      beforeAll(async () => {
        let db: Db;
        if (kind === "postgres") {
          testDb = await createTestDatabase();
          db = await openDatabase({ databaseUrl: testDb.url, poolSize: 8 });
        } else {
          db = await openMemoryStore();
        }
        await migrate(db);
        current = { kind, db, store: createResourceStore(db), url: testDb?.url };
      });
      afterAll(async () => {
        await current?.db.close();
        await testDb?.drop();
      });
      suite(() => {
        if (!current) throw new Error("backend not ready");
        return current;
      });
    });
  }
}

/**
 * Runs a suite once per backend, with fresh stores on demand: `fresh(list)`
 * opens a new, empty store (PGlite in memory from the run's image, or a
 * PostgreSQL database of its own) migrated by `list` (default: every
 * migration; a prefix of them for a store of an earlier schema). The stores
 * a test opened are closed, and their databases dropped, after it.
 */
export function describeFreshStores(
  name: string,
  suite: (fresh: (list?: Parameters<typeof migrate>[1]) => Promise<Db>) => void,
  kinds: readonly BackendKind[] = ["pglite", "postgres"],
): void {
  for (const kind of kinds) {
    describe.skipIf(kind === "postgres" && !pgReachable)(`${name} [${kind}]`, () => {
      const opened: Db[] = [];
      const databases: TestDatabase[] = [];
      afterEach(async () => {
        for (const db of opened.splice(0)) await db.close();
        for (const t of databases.splice(0)) await t.drop();
      });
      suite(async (list) => {
        let db: Db;
        if (kind === "postgres") {
          const t = await createTestDatabase();
          databases.push(t);
          db = await openDatabase({ databaseUrl: t.url, poolSize: 4 });
        } else {
          db = await openMemoryStore();
        }
        opened.push(db);
        await migrate(db, list);
        return db;
      });
    });
  }
}
