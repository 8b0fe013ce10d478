// The binary COPY reader (a parquet export's rows) borrows a pool connection
// per export and must give it back as it found it: many exports through one
// pooled connection add nothing to it (before, each added an error listener,
// and Node warned of a leak after ten), and an export whose consumer stopped
// early leaves the pool usable.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Db } from "../../src/store/index.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";

const available = await postgresReachable();

describe.runIf(available)("the binary COPY reader on PostgreSQL", () => {
  let target: TestDatabase;
  let db: Db;
  beforeAll(async () => {
    target = await createTestDatabase();
    db = await openDatabase({ databaseUrl: target.url, poolSize: 1 });
  });
  afterAll(async () => {
    await db?.close();
    await target?.drop();
  });

  async function drain(sql: string, params: unknown[]): Promise<number> {
    let bytes = 0;
    for await (const piece of db.copyOut!(sql, params)) bytes += piece.byteLength;
    return bytes;
  }

  it("runs many exports through one pooled connection without adding to it", async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on("warning", onWarning);
    try {
      const sizes: number[] = [];
      for (let i = 0; i < 25; i++) sizes.push(await drain("SELECT g FROM generate_series(1, $1::int) AS g", [100 + i]));
      // Each export read its own rows (a longer series, more bytes).
      for (let i = 1; i < sizes.length; i++) expect(sizes[i]).toBeGreaterThan(sizes[i - 1]!);
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off("warning", onWarning);
    }
    expect(warnings.map((w) => w.name)).not.toContain("MaxListenersExceededWarning");
    expect(db.poolStats?.().total).toBe(1);
  });

  it("drops the connection of an export whose consumer stopped, and answers the next one", async () => {
    for await (const piece of db.copyOut!("SELECT g, repeat('x', 1000) FROM generate_series(1, 20000) AS g", [])) {
      expect(piece.byteLength).toBeGreaterThan(0);
      break;
    }
    expect(await drain("SELECT 1", [])).toBeGreaterThan(0);
    expect((await db.query("SELECT 2 AS two", [])).rows).toEqual([{ two: 2 }]);
  });
});
