// The load benchmark's floor (bench/support/floor-server.mjs) must do the
// route's database work, or the figure it gives would flatter nothing but
// itself: every statement runs, in order, on one connection, each one a
// named prepared statement that stays prepared across calls (docs/benchmarks/load.md, "Load against prepared floors": the
// floor is the leanest service, which prepares what it sends), and every
// row comes back as JSON.
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";

const ENTRY = fileURLToPath(new URL("../../bench/support/floor-server.mjs", import.meta.url));
const pgOk = await postgresReachable();

describe.skipIf(!pgOk)("the load benchmark's floor server [postgres]", () => {
  let db: TestDatabase;
  let child: ChildProcess;
  let url: string;

  beforeAll(async () => {
    db = await createTestDatabase();
    const statements = JSON.stringify([
      { sql: "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY" },
      { sql: "SELECT $1::int + 1 AS n, current_setting('transaction_isolation') AS iso", params: [41] },
      {
        sql: "SELECT $1::text AS s, txid_current_if_assigned() IS NULL AS read_only",
        params: ["x"],
        name: "floor_test_1",
      },
      { sql: "SELECT name, from_sql FROM pg_prepared_statements ORDER BY name" },
      { sql: "COMMIT" },
    ]);
    child = spawn(process.execPath, [ENTRY], {
      env: {
        ...process.env,
        FLOOR_STATEMENTS: statements,
        DATABASE_URL: db.url,
        DATABASE_POOL_SIZE: "1",
        PG_OPTIONS: "-c jit=off",
      },
      stdio: ["ignore", "pipe", "inherit"],
    });
    const port = await new Promise<number>((resolve, reject) => {
      createInterface({ input: child.stdout! }).once("line", (line) =>
        resolve((JSON.parse(line) as { port: number }).port),
      );
      child.once("exit", (code) => reject(new Error(`floor server exited with ${String(code)}`)));
    });
    url = `http://127.0.0.1:${port}/any/path`;
  });

  afterAll(async () => {
    if (child.exitCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    }
    await db.drop();
  });

  it("runs every statement in one transaction, each prepared under its name once per connection, and answers their rows", async () => {
    // The pool has one connection: what pg_prepared_statements lists is every statement the floor prepared so far,
    // the listing itself included (it is parsed before it runs); COMMIT comes after it on the first call.
    const prepared = (names: string[]) => names.map((name) => ({ name, from_sql: false }));
    for (let i = 0; i < 3; i++) {
      const res = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ identifiers: ["a"] }),
      });
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual([
        { n: 42, iso: "repeatable read" },
        { s: "x", read_only: true },
        ...prepared(
          i === 0
            ? ["floor_0", "floor_1", "floor_3", "floor_test_1"]
            : ["floor_0", "floor_1", "floor_3", "floor_4", "floor_test_1"],
        ),
      ]);
    }
    const get = await fetch(url);
    expect(await get.json()).toHaveLength(7);
  });
});
