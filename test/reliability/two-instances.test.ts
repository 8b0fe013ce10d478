// Two service instances on one PostgreSQL database under concurrent load
// keep the contract's guarantees (docs/contract/): batches are all-or-nothing, one winner per
// create race and per registry pair, and as_of reads are exact to the
// microsecond whichever instance wrote and whichever reads.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { callRest } from "../security/calls.js";

const pgOk = await postgresReachable();
let db: TestDatabase;
let a: TestServer;
let b: TestServer;

beforeAll(async () => {
  if (!pgOk) return;
  db = await createTestDatabase();
  [a, b] = await Promise.all([startTestServer({ DATABASE_URL: db.url }), startTestServer({ DATABASE_URL: db.url })]);
}, 60_000);
afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await db?.drop();
});

const post = (srv: TestServer, path: string, body: unknown) =>
  callRest(srv.url, "POST", path, { body: JSON.stringify(body), timeoutMs: 60_000 });
const pick = (i: number) => (i % 2 === 0 ? a : b);

interface Flat {
  identifier: string;
  label: string;
  version: number;
  created_at: string;
  updated_at: string;
}

async function readAll(srv: TestServer, identifiers: string[], asOf?: string): Promise<Flat[]> {
  const r = await post(srv, "/resources/read", {
    identifiers,
    exclude_children: true,
    ...(asOf ? { as_of: asOf } : {}),
  });
  expect(r.status).toBe(200);
  return r.json as Flat[];
}

/** The instant one microsecond before an RFC 3339 timestamp with microseconds. */
function oneMicroBefore(ts: string): string {
  const m = /^(.*T\d\d:\d\d:\d\d)\.(\d{6})Z$/.exec(ts);
  if (!m) throw new Error(`unexpected timestamp ${ts}`);
  const micros = BigInt(Date.parse(`${m[1]}Z`)) * 1000n + BigInt(m[2]!) - 1n;
  const secs = micros / 1_000_000n;
  const frac = (micros % 1_000_000n).toString().padStart(6, "0");
  return `${new Date(Number(secs) * 1000).toISOString().slice(0, 19)}.${frac}Z`;
}

describe.skipIf(!pgOk)("two instances, one database", () => {
  it("concurrent overlapping batches through both are all-or-nothing", async () => {
    const pool = Array.from({ length: 30 }, (_, i) => `pool-${i}`);
    const batches = Array.from({ length: 80 }, (_, i) => {
      const ids = new Set<string>();
      while (ids.size < 4) ids.add(pool[Math.floor(Math.random() * pool.length)]!);
      return { label: `batch-${i}`, ids: [...ids] };
    });
    const results = await Promise.all(
      batches.map(async (batch, i) => {
        const r = await post(pick(i), "/resources/create", {
          resources: batch.ids.map((identifier) => ({ identifier, payload_type: "annotation", label: batch.label })),
        });
        return { batch, status: r.status, json: r.json as { created?: number; code?: string } };
      }),
    );
    const stored = new Map((await readAll(a, pool)).map((r) => [r.identifier, r.label]));
    let wins = 0;
    for (const { batch, status, json } of results) {
      const mine = batch.ids.filter((id) => stored.get(id) === batch.label).length;
      if (status === 200) {
        wins++;
        expect(json.created).toBe(batch.ids.length);
        expect(mine).toBe(batch.ids.length);
      } else {
        expect([400, 503]).toContain(status);
        if (status === 400) expect(json.code).toBe("failed_precondition");
        expect(mine).toBe(0);
      }
    }
    expect(wins).toBeGreaterThan(0);
    // Every stored item belongs to a batch that was acknowledged.
    const acked = new Set(results.filter((r) => r.status === 200).map((r) => r.batch.label));
    for (const label of stored.values()) expect(acked.has(label)).toBe(true);
  }, 120_000);

  it("one winner when both create the same identifier at once", async () => {
    for (let round = 0; round < 10; round++) {
      const id = `race-${round}`;
      const rs = await Promise.all(
        [a, b, a, b].map((s, i) =>
          post(s, "/resources/create", { resources: [{ identifier: id, payload_type: "annotation", label: `w${i}` }] }),
        ),
      );
      expect(rs.filter((r) => r.status === 200)).toHaveLength(1);
      for (const r of rs.filter((x) => x.status !== 200))
        expect((r.json as { code: string }).code).toBe("failed_precondition");
    }
  }, 60_000);

  it("as_of reads are exact whichever instance wrote and whichever reads", async () => {
    const ids = Array.from({ length: 6 }, (_, i) => `clock-${i}`);
    expect(
      (
        await post(a, "/resources/create", {
          resources: ids.map((identifier) => ({ identifier, payload_type: "annotation", label: "v1" })),
        })
      ).status,
    ).toBe(200);
    // Both instances update the same resources concurrently; each version's
    // state is recorded by reading it back at its own updated_at.
    await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        post(pick(i), "/resources/update", { updates: { [ids[i % ids.length]!]: { label: `u${i}` } } }).then((r) =>
          expect(r.status).toBe(200),
        ),
      ),
    );
    const now = await readAll(b, ids);
    for (const r of now) {
      // 1 create + one version per acknowledged update of this resource.
      const updates = Array.from({ length: 40 }, (_, i) => i).filter(
        (i) => ids[i % ids.length] === r.identifier,
      ).length;
      expect(r.version).toBe(1 + updates);
      for (const srv of [a, b]) {
        const [at] = await readAll(srv, [r.identifier], r.updated_at);
        expect(at).toEqual(r);
        const [before] = await readAll(srv, [r.identifier], oneMicroBefore(r.updated_at));
        expect(before?.version).toBe(r.version - 1);
        expect(before?.label).not.toBe(r.label);
      }
    }
  }, 120_000);

  it("registering one pair from both at once yields one identifier", async (ctx) => {
    const probe = await post(a, "/patients/register", { datasource_id: "ds-probe", external_uid: "probe" });
    if (probe.status === 501) ctx.skip(); // the registry has not landed on this branch
    const rs = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        post(pick(i), "/patients/register", { datasource_id: "ds-2", external_uid: "uid-race" }),
      ),
    );
    const ok = rs.filter((r) => r.status === 200);
    expect(ok).toHaveLength(1);
    for (const r of rs.filter((x) => x.status !== 200))
      expect((r.json as { code: string }).code).toBe("failed_precondition");
    const resolved = await Promise.all(
      [a, b].map((s) => post(s, "/patients/resolve", { datasource_id: "ds-2", external_uid: "uid-race" })),
    );
    for (const r of resolved) expect(r.json).toEqual(ok[0]!.json);
  }, 60_000);
});
