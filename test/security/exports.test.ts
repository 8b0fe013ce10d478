// MAX_CONCURRENT_EXPORTS, EXPORT_QUEUE_MS and EXPORT_STALL_MS (API.md section 16):
// clients that start /query/parquet and stop reading hold every slot; a further
// export waits its queue time and gets 429; ordinary calls still answer; once the
// stall time passes the stalled exports are cut and a new export works.
// Every export shares the process's PARQUET_ENCODER_WORKERS encoder threads.
import { randomBytes } from "node:crypto";
import { connect, type ClientHttp2Session } from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/app.js";

const reachable = await postgresReachable();
const STALLED = 3;
let srv: TestServer;
let db: TestDatabase;
const closed = new Set<ClientHttp2Session>();

async function post(path: string, body: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${srv.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: res.status, json: await res.json().catch(() => undefined) };
}

/**
 * Starts an export over HTTP/2 and stops reading after its first bytes: the
 * stream's flow-control window then stops the server (a TCP client's receive
 * buffer on loopback can hold a whole file).
 */
function stalledExport(): Promise<ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = connect(srv.url);
    session.on("error", () => undefined);
    const stream = session.request({ ":method": "POST", ":path": "/query/parquet", "content-type": "application/json" });
    stream.end(JSON.stringify({ payload_type: "annotation" }));
    stream.on("error", () => undefined);
    stream.once("close", () => closed.add(session));
    stream.once("data", () => {
      stream.pause();
      resolve(session);
    });
    stream.once("response", (h) => {
      if (h[":status"] !== 200) reject(new Error(`export answered ${String(h[":status"])}`));
    });
  });
}

describe.runIf(reachable)("parquet export limits on PostgreSQL", () => {
  beforeAll(async () => {
    db = await createTestDatabase();
    srv = await startTestServer({ DATABASE_URL: db.url, MAX_CONCURRENT_EXPORTS: String(STALLED), EXPORT_QUEUE_MS: "300", EXPORT_STALL_MS: "2000", PARQUET_ENCODER_WORKERS: "2" });
    for (let b = 0; b < 8; b++) {
      const resources = Array.from({ length: 500 }, (_, i) => ({
        identifier: `ex-${b}-${i}`,
        payload_type: "annotation",
        label: "x",
        text: randomBytes(3000).toString("base64"),
      }));
      const r = await post("/resources/create", { resources });
      expect(r.status).toBe(200);
    }
  }, 60_000);
  afterAll(async () => {
    await srv?.close();
    await db?.drop();
  });

  it("queues then refuses beyond the cap, keeps answering, and cuts stalled exports", async () => {
    const sockets = await Promise.all(Array.from({ length: STALLED }, () => stalledExport()));
    try {
      const refused = await post("/query/parquet", { payload_type: "annotation", limit: 1 });
      expect(refused.status).toBe(429);
      expect(refused.json.reason ?? refused.json.code).toBeDefined();
      expect(JSON.stringify(refused.json)).toContain("TOO_MANY_EXPORTS");

      // Ordinary calls still answer while every export slot is held.
      expect((await fetch(`${srv.url}/healthz`)).status).toBe(200);
      expect((await fetch(`${srv.url}/parents/ex-0-0`)).status).toBe(200);
      expect((await post("/query", { payload_type: "annotation", limit: 2 })).status).toBe(200);

      // After the stall time the stalled exports are cut and their slots and connections freed.
      let status = 0;
      for (let i = 0; i < 100 && status !== 200; i++) {
        await new Promise((r) => setTimeout(r, 200));
        const res = await fetch(`${srv.url}/query/parquet`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ payload_type: "annotation", limit: 1 }) });
        status = res.status;
        await res.arrayBuffer();
      }
      expect(status).toBe(200);
      // Every stalled export's transaction ends: nothing is left open on the server.
      const pg = (await import("pg")).default;
      const c = new pg.Client({ connectionString: db.url });
      await c.connect();
      try {
        let open = -1;
        for (let i = 0; i < 100 && open !== 0; i++) {
          const { rows } = await c.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'");
          open = rows[0].n;
          if (open !== 0) await new Promise((r) => setTimeout(r, 100));
        }
        expect(open).toBe(0);
      } finally {
        await c.end();
      }
      // The server closed each stalled export's stream.
      for (let i = 0; i < 100 && closed.size < STALLED; i++) await new Promise((r) => setTimeout(r, 100));
      expect(closed.size).toBe(STALLED);
    } finally {
      for (const s of sockets) s.destroy();
    }
  }, 60_000);

  it("runs more concurrent exports than encoder workers on the one shared pool", async () => {
    const { parquetMetadata, parquetReadObjects } = await import("hyparquet");
    const files = await Promise.all(
      Array.from({ length: STALLED }, async () => {
        const res = await fetch(`${srv.url}/query/parquet`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ payload_type: "annotation", sort_by: "identifier", sort_order: "asc" }) });
        expect(res.status).toBe(200);
        return res.arrayBuffer();
      }),
    );
    const expected = Array.from({ length: 8 }, (_, b) => Array.from({ length: 500 }, (_, i) => `ex-${b}-${i}`)).flat().sort();
    for (const buf of files) {
      expect(Number(parquetMetadata(buf).num_rows)).toBe(4000);
      const rows = await parquetReadObjects({ file: buf, columns: ["identifier"] });
      expect(rows.map((r) => r.identifier)).toEqual(expected);
    }
    const stats = srv.app.encoders.stats();
    expect(stats.size).toBe(2);
    expect(stats.peakThreads).toBeLessThanOrEqual(2);
    expect(stats.started).toBeGreaterThanOrEqual(1);
  }, 60_000);
});
