// Each test file that needs PostgreSQL gets a database of its own, made here
// and dropped afterwards. Without a reachable server the PostgreSQL variant
// is skipped, unless REQUIRE_POSTGRES=1 (as in CI), which makes it fail.
import { randomBytes } from "node:crypto";
import pg from "pg";

export const ADMIN_URL = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
export const REQUIRE_POSTGRES = process.env.REQUIRE_POSTGRES === "1";

export interface TestDatabase {
  readonly url: string;
  drop(): Promise<void>;
}

async function adminClient(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: ADMIN_URL, connectionTimeoutMillis: 3000 });
  await client.connect();
  return client;
}

let reachable: Promise<boolean> | undefined;

/** Whether the PostgreSQL server of the tests answers (asked once per worker). */
export function postgresReachable(): Promise<boolean> {
  reachable ??= (async () => {
    try {
      const c = await adminClient();
      await c.end();
      return true;
    } catch (err) {
      if (REQUIRE_POSTGRES) {
        throw new Error(`REQUIRE_POSTGRES=1 but PostgreSQL at ${ADMIN_URL} is not reachable: ${String(err)}`);
      }
      return false;
    }
  })();
  return reachable;
}

/** A fresh, empty database; `drop()` removes it (closing what is still connected). */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `rs_test_${process.pid}_${randomBytes(4).toString("hex")}`;
  const admin = await adminClient();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const c = await adminClient();
      try {
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}
