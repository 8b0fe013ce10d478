// The choice of where a read runs (src/store/replicas.ts), on stand-in
// databases whose clocks the test sets: the real-standby test
// (standby-reads.test.ts) shows the same on PostgreSQL.
import { describe, expect, it } from "vitest";
import { unavailable } from "../../src/errors.js";
import { readerFor, primaryWithStandbys, type Db, type Queryable } from "../../src/store/index.js";

interface Fake {
  db: Db;
  /** The committed (primary) or replayed (standby) clock; null = -infinity. */
  clock: string | null;
  clockAsks: number;
  /** Clock queries never answer. */
  hang: boolean;
  /** Every statement fails as a lost connection does. */
  down: boolean;
}

function fake(name: string, clock: string | null): Fake {
  const f: Fake = { clock, clockAsks: 0, hang: false, down: false, db: undefined as unknown as Db };
  const q: Queryable = {
    async query<R>(sql: string) {
      if (f.down) throw unavailable("database unavailable");
      if (/FROM clock/.test(sql) && !/ran_on/.test(sql)) {
        f.clockAsks += 1;
        if (f.hang) await new Promise(() => {});
        return { rows: [{ at: f.clock }] as R[] };
      }
      return { rows: [{ ran_on: name }] as R[] };
    },
    async exec() {},
  };
  f.db = {
    kind: "postgres",
    capabilities: { streamedBatches: true, listen: false, embedded: false },
    ...q,
    transaction: async (fn) => {
      if (f.down) throw unavailable("database unavailable");
      return fn(q);
    },
    ping: async () => {},
    close: async () => {},
  };
  return f;
}

const T = (s: number) => `2026-01-01T00:00:${String(s).padStart(2, "0")}.000000Z`;

async function ranOn(db: Db, point: string | undefined): Promise<string> {
  const on = await readerFor(db, point);
  const { rows } = await on.query<{ ran_on: string }>("SELECT 'x' AS ran_on");
  return rows[0]!.ran_on;
}

function setup(opts: { ttl?: number; timeout?: number } = {}) {
  const primary = fake("primary", T(30));
  const a = fake("a", T(10));
  const b = fake("b", T(20));
  const db = primaryWithStandbys(primary.db, [a.db, b.db], {
    timeoutMs: opts.timeout ?? 50,
    stampTtlMs: opts.ttl ?? 60_000,
  });
  return { primary, a, b, db };
}

describe("read routing among standbys", () => {
  it("runs a read on the first standby that has replayed its point, else the next, else the primary", async () => {
    const { db } = setup();
    expect(await ranOn(db, T(5))).toBe("a");
    expect(await ranOn(db, T(15))).toBe("b");
    expect(await ranOn(db, T(25))).toBe("primary");
    // No as_of: at the primary's committed clock (30), which no standby holds.
    expect(await ranOn(db, undefined)).toBe("primary");
    expect(db.readCounts?.()).toEqual({ primary: 2, standby: 2 });
  });

  it("takes least(as_of, committed clock) as the point, so a future as_of may run on a caught-up standby", async () => {
    const { db, primary, b } = setup({ ttl: 0 });
    b.clock = T(30);
    expect(await ranOn(db, T(59))).toBe("b");
    expect(await ranOn(db, undefined)).toBe("b");
    primary.clock = T(31);
    expect(await ranOn(db, undefined)).toBe("primary");
  });

  it("trusts a cached stamp past the point without asking, and asks again only after the TTL", async () => {
    const { db, a, primary } = setup({ ttl: 60_000 });
    expect(await ranOn(db, T(5))).toBe("a");
    const asks = a.clockAsks;
    expect(await ranOn(db, T(6))).toBe("a");
    expect(a.clockAsks).toBe(asks);
    expect(primary.clockAsks).toBe(1);
    // a caught up, but within the TTL its cached stamp (10) stands: the next standby answers.
    a.clock = T(30);
    expect(await ranOn(db, T(12))).toBe("b");
  });

  it("skips a standby that does not answer within the bound, and leaves it alone afterwards", async () => {
    const { db, a, b, primary } = setup({ ttl: 0, timeout: 30 });
    a.hang = true;
    b.hang = true;
    expect(await ranOn(db, undefined)).toBe("primary");
    expect([a.clockAsks, b.clockAsks]).toEqual([1, 1]);
    const primaryAsks = primary.clockAsks;
    expect(await ranOn(db, undefined)).toBe("primary");
    // Marked down: not asked again for a while, and with every standby down the primary's clock is not needed either.
    expect([a.clockAsks, b.clockAsks]).toEqual([1, 1]);
    expect(primary.clockAsks).toBe(primaryAsks);
  });

  it("runs a read again on the primary when its standby fails under it", async () => {
    const { db, a } = setup();
    expect(await ranOn(db, T(5))).toBe("a");
    a.down = true;
    expect(await ranOn(db, T(5))).toBe("primary");
    expect(db.readCounts?.()).toEqual({ primary: 1, standby: 1 });
    // ...and a transaction that could not begin there, too.
    const { db: db2, a: a2 } = setup();
    await ranOn(db2, T(5));
    a2.down = true;
    const on = await readerFor(db2, T(5));
    expect(
      await on.transaction(async (tx) => (await tx.query<{ ran_on: string }>("SELECT 1 AS ran_on")).rows[0]!.ran_on),
    ).toBe("primary");
  });

  it("never runs a transaction again once it has begun on the standby (it may have sent rows on)", async () => {
    const { db, a } = setup();
    const on = await readerFor(db, T(5));
    let calls = 0;
    await expect(
      on.transaction(async (tx) => {
        calls += 1;
        a.down = true;
        await tx.query("SELECT 1 AS ran_on");
      }),
    ).rejects.toThrow(/unavailable/);
    expect(calls).toBe(1);
  });

  it("is the database itself without standbys", async () => {
    const p = fake("primary", T(1));
    expect(await readerFor(p.db, T(1))).toBe(p.db);
  });
});
