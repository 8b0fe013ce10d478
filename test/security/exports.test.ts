// MAX_CONCURRENT_EXPORTS, EXPORT_QUEUE_MS and EXPORT_STALL_MS (docs/contract/16-limits.md):
// ten clients that start /query/parquet and stop reading: the cap's worth hold
// every slot, the rest (and any further export) wait their queue time and get
// 429; ordinary calls still answer; once the
// stall time passes the stalled exports are cut and a new export works. Over
// gRPC, gRPC-Web and Connect the cut resets the stalled call's HTTP/2 stream
// (other streams of the session go on) or closes its HTTP/1.1 connection.
// Every export shares the process's PARQUET_ENCODER_WORKERS encoder threads.
import { create, toBinary } from "@bufbuild/protobuf";
import { randomBytes } from "node:crypto";
import {
  connect,
  constants,
  type ClientHttp2Session,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
} from "node:http2";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { envelope } from "../support/envelopes.js";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";

const reachable = await postgresReachable();
const STALLED = 3;
const STALL_MS = 3000;
/** How long after EXPORT_STALL_MS a stalled call may stay open. */
const CUT_WITHIN_MS = 5000;
let srv: TestServer;
let db: TestDatabase;
const closed = new Set<ClientHttp2Session>();

async function post(path: string, body: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${srv.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json().catch(() => undefined) };
}

/**
 * Starts an export over HTTP/2 and stops reading after its first bytes: the
 * stream's flow-control window then stops the server (a TCP client's receive
 * buffer on loopback can hold a whole file). Resolves with the answer's
 * status: 200 once the first bytes came (the stream is then left stalled), or
 * the refusal's status.
 */
function stalledExport(): Promise<{ session: ClientHttp2Session; status: number }> {
  return new Promise((resolve) => {
    const session = connect(srv.url);
    session.on("error", () => undefined);
    const stream = session.request({
      ":method": "POST",
      ":path": "/query/parquet",
      "content-type": "application/json",
    });
    stream.end(JSON.stringify({ payload_type: "annotation" }));
    stream.on("error", () => undefined);
    stream.once("response", (h) => {
      const status = Number(h[":status"]);
      if (status !== 200) return resolve({ session, status });
      stream.once("close", () => closed.add(session));
      stream.once("data", () => {
        stream.pause();
        resolve({ session, status });
      });
    });
  });
}

const QUERY_PARQUET = "/resourcestore.v2.QueryService/QueryParquet";

/** One enveloped QueryRequest for every annotation. */
function exportRequest(): Buffer {
  return envelope(toBinary(QueryRequestSchema, create(QueryRequestSchema, { payloadType: "annotation" })));
}

const RPC_HEADERS = {
  grpc: { "content-type": "application/grpc+proto", te: "trailers" },
  "grpc-web": { "content-type": "application/grpc-web+proto" },
  connect: { "content-type": "application/connect+proto", "connect-protocol-version": "1" },
} as const;

/** One request on `session`, read to its end. */
function h2Call(
  session: ClientHttp2Session,
  headers: OutgoingHttpHeaders,
  body?: string,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const stream = session.request(headers);
    let status = 0;
    let text = "";
    stream.on("response", (h: IncomingHttpHeaders) => (status = Number(h[":status"])));
    stream.setEncoding("utf8");
    stream.on("data", (d: string) => (text += d));
    stream.on("end", () => resolve({ status, text }));
    stream.on("error", reject);
    stream.end(body);
  });
}

/** How a stalled call ended: when its first bytes came, and when and how it was closed. */
interface StalledCall {
  readonly firstBytesAt: number;
  readonly closed: Promise<{ at: number; rstCode?: number }>;
}

/** A QueryParquet call on `session` that reads its first bytes and then nothing. */
function stalledRpcStream(session: ClientHttp2Session, headers: OutgoingHttpHeaders): Promise<StalledCall> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":method": "POST", ":path": QUERY_PARQUET, ...headers });
    stream.on("error", () => undefined);
    const closed = new Promise<{ at: number; rstCode: number }>((done) =>
      stream.once("close", () => done({ at: Date.now(), rstCode: stream.rstCode })),
    );
    stream.once("response", (h) => {
      if (h[":status"] !== 200) reject(new Error(`export answered ${String(h[":status"])}`));
    });
    stream.once("data", () => {
      stream.pause();
      resolve({ firstBytesAt: Date.now(), closed });
    });
    stream.end(exportRequest());
  });
}

/**
 * A QueryParquet call over its own HTTP/1.1 connection that reads the first
 * bytes and then nothing. A paused socket does not see the server close it,
 * so an empty line (which HTTP/1.1 allows before a request) is sent now and
 * then: once the server has closed the connection, that write fails.
 */
function stalledRpcSocket(headers: Record<string, string>): Promise<StalledCall & { socket: net.Socket }> {
  return new Promise((resolve, reject) => {
    const body = exportRequest();
    const socket = net.connect(srv.port, "127.0.0.1");
    socket.once("error", reject);
    const lines = Object.entries({
      host: `127.0.0.1:${srv.port}`,
      ...headers,
      "content-length": String(body.length),
    }).map(([k, v]) => `${k}: ${v}\r\n`);
    socket.write(`POST ${QUERY_PARQUET} HTTP/1.1\r\n${lines.join("")}\r\n`);
    socket.write(body);
    socket.once("data", (first: Buffer) => {
      socket.pause();
      socket.off("error", reject);
      socket.on("error", () => undefined);
      if (!first.toString("latin1").startsWith("HTTP/1.1 200")) {
        reject(new Error(`export answered ${first.toString("latin1", 0, 20)}`));
        return;
      }
      const probe = setInterval(() => socket.write("\r\n"), 200);
      const closed = new Promise<{ at: number }>((done) =>
        socket.once("close", () => {
          clearInterval(probe);
          done({ at: Date.now() });
        }),
      );
      resolve({ socket, firstBytesAt: Date.now(), closed });
    });
  });
}

/** When `call` closed, or undefined when it was still open CUT_WITHIN_MS after EXPORT_STALL_MS (counted from its first bytes). */
async function closedInTime(call: StalledCall, slackMs = 0): Promise<{ at: number; rstCode?: number } | undefined> {
  const bound = call.firstBytesAt + STALL_MS + CUT_WITHIN_MS + slackMs;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), Math.max(0, bound - Date.now()))));
  try {
    return await Promise.race([call.closed, late]);
  } finally {
    clearTimeout(timer);
  }
}

describe.runIf(reachable)("parquet export limits on PostgreSQL", () => {
  beforeAll(async () => {
    db = await createTestDatabase();
    srv = await startTestServer({
      DATABASE_URL: db.url,
      MAX_CONCURRENT_EXPORTS: String(STALLED),
      EXPORT_QUEUE_MS: "300",
      EXPORT_STALL_MS: String(STALL_MS),
      PARQUET_ENCODER_WORKERS: "2",
    });
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
    // Ten clients start an export and stop reading: the cap's worth hold every
    // slot; the rest wait their queue time and are refused.
    const attempts = await Promise.all(Array.from({ length: 10 }, () => stalledExport()));
    const sockets = attempts.map((a) => a.session);
    try {
      expect(attempts.filter((a) => a.status === 200)).toHaveLength(STALLED);
      expect(attempts.filter((a) => a.status === 429)).toHaveLength(10 - STALLED);
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
        const res = await fetch(`${srv.url}/query/parquet`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ payload_type: "annotation", limit: 1 }),
        });
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
          const { rows } = await c.query(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
          );
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

  it("resets a stalled gRPC, gRPC-Web or Connect export's HTTP/2 stream and leaves the session's other streams alone", async () => {
    const session = connect(srv.url, { settings: { initialWindowSize: 16 * 1024 } });
    session.on("error", () => undefined);
    // Room on the connection for every stream: only each stalled stream's own window fills.
    session.on("connect", () => session.setLocalWindowSize(64 * 1024 * 1024));
    try {
      const stalled = await Promise.all(Object.values(RPC_HEADERS).map((h) => stalledRpcStream(session, h)));
      // While they are stalled, the same session answers other calls.
      expect((await h2Call(session, { ":method": "GET", ":path": "/healthz" })).status).toBe(200);
      for (const call of stalled) {
        const closed = await closedInTime(call);
        expect(closed, "the stalled stream was not ended in time").toBeDefined();
        expect(closed?.rstCode).toBe(constants.NGHTTP2_CANCEL);
      }
      // The session outlives the resets and still carries calls.
      expect(session.destroyed).toBe(false);
      const count = await h2Call(
        session,
        { ":method": "POST", ":path": "/resourcestore.v2.QueryService/Count", "content-type": "application/json" },
        JSON.stringify({ payload_type: "annotation" }),
      );
      expect(count.status).toBe(200);
      expect(JSON.parse(count.text)).toEqual({ count: "4000" });
    } finally {
      session.destroy();
    }
  }, 60_000);

  it("closes a stalled gRPC-Web or Connect export's HTTP/1.1 connection", async () => {
    const calls = await Promise.all([stalledRpcSocket(RPC_HEADERS["grpc-web"]), stalledRpcSocket(RPC_HEADERS.connect)]);
    try {
      for (const call of calls) {
        // The server's writes back up only once the kernel's socket buffers (some MB) are full.
        expect(await closedInTime(call, 10_000), "the stalled connection was not closed in time").toBeDefined();
      }
      expect((await fetch(`${srv.url}/healthz`)).status).toBe(200);
    } finally {
      for (const c of calls) c.socket.destroy();
    }
  }, 60_000);

  it("runs more concurrent exports than encoder workers on the one shared pool", async () => {
    const { parquetMetadata, parquetReadObjects } = await import("hyparquet");
    const files = await Promise.all(
      Array.from({ length: STALLED }, async () => {
        const res = await fetch(`${srv.url}/query/parquet`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ payload_type: "annotation", sort_by: "identifier", sort_order: "asc" }),
        });
        expect(res.status).toBe(200);
        return res.arrayBuffer();
      }),
    );
    const expected = Array.from({ length: 8 }, (_, b) => Array.from({ length: 500 }, (_, i) => `ex-${b}-${i}`))
      .flat()
      .sort();
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
