// Reads on a real hot standby (docs/scaling.md): a primary and a streaming standby
// built from this machine's PostgreSQL binaries (test/support/pg-cluster.ts),
// one service with DATABASE_READ_URLS and one on the primary alone to compare
// with. Skipped only when there are no PostgreSQL binaries and
// REQUIRE_POSTGRES is unset.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createResourceStoreClient } from "../../src/client/index.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { findPostgresBin, startPgCluster, type PgCluster } from "../support/pg-cluster.js";
import { REQUIRE_POSTGRES } from "../support/postgres.js";

const bin = findPostgresBin();

type Json = Record<string, any>;

async function call(srv: TestServer, method: string, body: unknown): Promise<Json> {
  const res = await fetch(
    `${srv.url}/resourcestore.${method.startsWith("LineageService/Children") ? "v1" : "v2"}.${method}`,
    {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    },
  );
  const json = (await res.json()) as Json;
  if (res.status !== 200) throw new Error(`${method}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

async function readsBy(srv: TestServer): Promise<{ primary: number; standby: number }> {
  const text = await (await fetch(`${srv.url}/metrics`)).text();
  const value = (target: string) => {
    const m = new RegExp(`^rs_db_reads_total\\{target="${target}"\\} (\\d+)$`, "m").exec(text);
    if (!m) throw new Error(`rs_db_reads_total{target="${target}"} missing from /metrics`);
    return Number(m[1]);
  };
  return { primary: value("primary"), standby: value("standby") };
}

/** Runs fn and says where its reads ran (differences of the counters). */
async function where<T>(
  srv: TestServer,
  fn: () => Promise<T>,
): Promise<{ result: T; primary: number; standby: number }> {
  const before = await readsBy(srv);
  const result = await fn();
  const after = await readsBy(srv);
  return { result, primary: after.primary - before.primary, standby: after.standby - before.standby };
}

describe.skipIf(bin === undefined && !REQUIRE_POSTGRES)("reads on a streaming-replication standby", () => {
  let cluster: PgCluster | undefined;
  let routed: TestServer | undefined;
  let direct: TestServer | undefined;
  const ids = Array.from({ length: 12 }, (_, i) => `pt-${String(i).padStart(2, "0")}`);
  let t1 = "";
  let t2 = "";

  const routedSrv = () => routed as TestServer;
  const directSrv = () => direct as TestServer;
  const standby = () => cluster as PgCluster;

  /** The reads of the issue, at one read point (as_of; undefined = now). */
  const reads = (asOf: string | undefined) => {
    const at = asOf !== undefined ? { asOf } : {};
    return [
      ["ResourceService/Read", { identifiers: ["ds-1", ...ids, "missing"], ...at }],
      ["QueryService/Query", { payloadType: "patient", sortBy: "identifier", limit: 5, ...at }],
      ["QueryService/Count", { payloadType: "patient", ...at }],
      ["QueryService/Count", { parentIdentifier: "ds-1", includeIndirectParents: true, ...at }],
      ["LineageService/Children", { parentIdentifier: "ds-1", ...at }],
      ["LineageService/Parents", { identifier: "st-1", ...at }],
    ] as const;
  };
  const runReads = async (srv: TestServer, asOf: string | undefined) => {
    const out: Json[] = [];
    for (const [method, body] of reads(asOf)) out.push(await call(srv, method, body));
    return out;
  };

  beforeAll(async () => {
    if (bin === undefined) {
      throw new Error(
        "REQUIRE_POSTGRES=1 but no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup, postgres) were found; set PG_BIN",
      );
    }
    cluster = await startPgCluster(bin);
    direct = await startTestServer({ DATABASE_URL: cluster.primaryUrl });
    routed = await startTestServer({
      DATABASE_URL: cluster.primaryUrl,
      DATABASE_READ_URLS: cluster.standbyUrl,
      // Ask the standby afresh whenever its cached stamp is not enough, so the test does not depend on timing.
      DATABASE_READ_STAMP_TTL_MS: "0",
    });
    // History: a tree, then changes to it, so that as_of t1 and t2 differ from each other and from now.
    await call(directSrv(), "ResourceService/Create", {
      resources: [
        { identifier: "ds-1", datasource: { name: "A" } },
        ...ids.map((id) => ({
          identifier: id,
          parentIdentifier: "ds-1",
          patient: { datasourceId: "ds-1", birthYear: 1950 },
        })),
        { identifier: "st-1", parentIdentifier: "pt-10", study: { modality: "CT" } },
      ],
    });
    t1 = (await call(directSrv(), "ResourceService/Read", { identifiers: ["ds-1"] })).resources[0].updated_at as string;
    await call(directSrv(), "ResourceService/Delete", { identifiers: ids.slice(0, 3) });
    await call(directSrv(), "ResourceService/Create", {
      resources: [{ identifier: "pt-new", parentIdentifier: "ds-1", patient: { datasourceId: "ds-1" } }],
    });
    t2 = (await call(directSrv(), "ResourceService/Read", { identifiers: ["pt-new"] })).resources[0]
      .updated_at as string;
    await call(directSrv(), "ResourceService/Delete", { identifiers: ["pt-05"] });
    expect([t1, t2].every((t) => /^\d{4}-.*Z$/.test(t))).toBe(true);
    await standby().caughtUp();
  }, 60_000);

  afterAll(async () => {
    await routed?.close();
    await direct?.close();
    await cluster?.stop();
  }, 30_000);

  it("serves as_of reads from the standby with exactly what the primary gives", async () => {
    for (const asOf of [t1, t2]) {
      const expected = await runReads(directSrv(), asOf);
      const { result, primary, standby: onStandby } = await where(routedSrv(), () => runReads(routedSrv(), asOf));
      expect(result).toEqual(expected);
      expect(onStandby).toBe(reads(asOf).length);
      expect(primary).toBe(0);
    }
    // The two points differ, so equal answers are not equal by accident.
    expect((await runReads(directSrv(), t1))[2]).not.toEqual((await runReads(directSrv(), t2))[2]);
  });

  it("serves reads without as_of from a caught-up standby, at the primary's committed clock", async () => {
    const expected = await runReads(directSrv(), undefined);
    const { result, primary, standby: onStandby } = await where(routedSrv(), () => runReads(routedSrv(), undefined));
    expect(result).toEqual(expected);
    expect(onStandby).toBe(reads(undefined).length);
    expect(primary).toBe(0);
  });

  it("streams QueryParquet from the standby (a server-side cursor in a read-only transaction)", async () => {
    const parquet = async (srv: TestServer) => {
      const client = createResourceStoreClient({ baseUrl: srv.url, transport: "connect" });
      const parts: Uint8Array[] = [];
      for await (const body of client.query.queryParquet({ payloadType: "patient", asOf: t2 })) parts.push(body.data);
      return Buffer.concat(parts);
    };
    const expected = await parquet(directSrv());
    const { result, primary, standby: onStandby } = await where(routedSrv(), () => parquet(routedSrv()));
    expect(result.length).toBeGreaterThan(0);
    expect(result.equals(expected)).toBe(true);
    expect(onStandby).toBe(1);
    expect(primary).toBe(0);
  });

  it("follows a query's cursor on the standby", async () => {
    const pages = async (srv: TestServer) => {
      const seen: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await call(srv, "QueryService/Query", {
          payloadType: "patient",
          limit: 4,
          asOf: t2,
          ...(cursor ? { cursor } : {}),
        });
        seen.push(...(page.results as Json[]).map((r) => r.identifier as string));
        cursor = page.nextCursor as string | undefined;
      } while (cursor);
      return seen;
    };
    const expected = await pages(directSrv());
    const { result, primary } = await where(routedSrv(), () => pages(routedSrv()));
    expect(result).toEqual(expected);
    expect(primary).toBe(0);
  });

  it("reads a write at once (no as_of) and keeps a lagging standby out of reads past its replayed point", async () => {
    // Caught up: a read now runs on the standby once it has replayed the primary's committed clock.
    const now = await where(routedSrv(), () => call(routedSrv(), "ResourceService/Read", { identifiers: ["ds-1"] }));
    expect(now.standby).toBe(1);

    await standby().standbySql("SELECT pg_wal_replay_pause()");
    try {
      await call(routedSrv(), "ResourceService/Create", {
        resources: [{ identifier: "pt-late", parentIdentifier: "ds-1", patient: { datasourceId: "ds-1" } }],
      });
      // Read-your-writes: the standby has not replayed the write, so the read runs on the primary.
      const mine = await where(routedSrv(), () =>
        call(routedSrv(), "ResourceService/Read", { identifiers: ["pt-late"] }),
      );
      expect(mine.result.resources.map((r: Json) => r.identifier)).toEqual(["pt-late"]);
      expect(mine.primary).toBe(1);
      expect(mine.standby).toBe(0);
      const late = mine.result.resources[0].updated_at as string;
      // The standby really lacks it: read there directly, the resource is not there.
      const [row] = await standby().standbySql<{ n: string }>(
        "SELECT count(*)::text AS n FROM resources WHERE identifier = 'pt-late'",
      );
      expect(row?.n).toBe("0");

      // as_of at the write: past the standby's point, so the primary answers, with the write.
      const past = await where(routedSrv(), () =>
        call(routedSrv(), "QueryService/Count", { payloadType: "patient", asOf: late }),
      );
      expect(past.result).toEqual(
        await call(directSrv(), "QueryService/Count", { payloadType: "patient", asOf: late }),
      );
      expect(past.primary).toBe(1);
      // ...while a point the standby holds is still read there.
      const before = await where(routedSrv(), () =>
        call(routedSrv(), "QueryService/Count", { payloadType: "patient", asOf: t2 }),
      );
      expect(before, JSON.stringify(before)).toMatchObject({ standby: 1 });
    } finally {
      await standby().standbySql("SELECT pg_wal_replay_resume()");
    }
    await standby().caughtUp();
    const again = await where(routedSrv(), () =>
      call(routedSrv(), "ResourceService/Read", { identifiers: ["pt-late"] }),
    );
    expect(again.result.resources.map((r: Json) => r.identifier)).toEqual(["pt-late"]);
    expect(again.standby).toBe(1);
  });

  it("goes on reading through the primary with the standby stopped", async () => {
    const expectedPast = await runReads(directSrv(), t1);
    const expectedNow = await runReads(directSrv(), undefined);
    await standby().stopStandby();
    const {
      result,
      primary,
      standby: onStandby,
    } = await where(routedSrv(), async () => [await runReads(routedSrv(), t1), await runReads(routedSrv(), undefined)]);
    expect(result).toEqual([expectedPast, expectedNow]);
    expect(primary).toBe(2 * reads(t1).length);
    expect(onStandby).toBe(0);
    // Writes were never the standby's business.
    await call(routedSrv(), "ResourceService/Create", {
      resources: [{ identifier: "pt-after", parentIdentifier: "ds-1", patient: { datasourceId: "ds-1" } }],
    });
    expect((await call(routedSrv(), "ResourceService/Read", { identifiers: ["pt-after"] })).resources).toHaveLength(1);
  });
});
