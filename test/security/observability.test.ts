// Logs: one JSON line per call with a request id (the client's, or a fresh
// one echoed back), route, code and duration, and never a payload value, an
// external uid or a token. Metrics: calls by route and code with a latency
// histogram over every protocol, the PostgreSQL pool, and the change feed.
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CreateRequestSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { createApp, type App } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { startServer, type RunningServer } from "../../src/server.js";
import { KEY_IN_DATABASE_MESSAGE, loadRegistryKeys, rehashRegistry } from "../../src/store/index.js";
import { logLines } from "../support/log-lines.js";
import { TEST_REGISTRY_SECRET } from "../support/registry-key.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { callRest, callRpc, transportFor } from "./calls.js";

const TOKEN = "obs-secret-token-4711";
const pgOk = await postgresReachable();
const SECRETS = [
  "PAYLOAD-SECRET-LABEL",
  "EXT-SECRET-UID-123",
  "SECRET-TEXT-VALUE",
  TOKEN,
  "SECRET-IN-BAD-BODY",
  TEST_REGISTRY_SECRET,
];
const lines: string[] = [];
let app: App;
let server: RunningServer;
let url: string;
let dataDir: string;
let pgdb: TestDatabase | undefined;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "rs-obs-"));
  const env: Record<string, string> = {
    DATA_DIR: dataDir,
    LOG_LEVEL: "debug",
    API_TOKENS: `${TOKEN}=admin`,
    REGISTRY_SECRET: TEST_REGISTRY_SECRET,
  };
  if (pgOk) {
    pgdb = await createTestDatabase();
    env.DATABASE_URL = pgdb.url;
  }
  const config = loadConfig(env);
  app = await createApp(config, logLines(config.logLevel, lines).logger);
  server = await startServer({ port: 0, host: "127.0.0.1", handler: app.handler });
  url = `http://127.0.0.1:${server.port}`;
}, 60_000);
afterAll(async () => {
  await server?.close(1000);
  await app?.close();
  await pgdb?.drop();
  await rm(dataDir, { recursive: true, force: true });
});

const auth = { authorization: `Bearer ${TOKEN}` };

describe("logs", () => {
  it("one line per call with a request id, and no payload, external uid or token", async () => {
    const mine = "req-abc-123";
    const created = await callRest(url, "POST", "/resources/create", {
      headers: { ...auth, "x-request-id": mine },
      body: JSON.stringify({
        resources: [{ identifier: "obs-1", payload_type: "annotation", label: SECRETS[0], text: SECRETS[2] }],
      }),
    });
    expect(created.status).toBe(200);
    const fresh = await fetch(`${url}/resources/read`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: '{"identifiers":["obs-1"]}',
    });
    const freshId = fresh.headers.get("x-request-id");
    expect(freshId).toMatch(/^[0-9a-f-]{36}$/);
    await callRest(url, "POST", "/patients/register", {
      headers: auth,
      body: JSON.stringify({ datasource_id: "ds", external_uid: SECRETS[1] }),
    });
    await callRest(url, "POST", "/patients/resolve", {
      headers: auth,
      body: JSON.stringify({ datasource_id: "ds", external_uid: SECRETS[1] }),
    });
    const bad = await callRest(url, "POST", "/resources/create", {
      headers: auth,
      body: JSON.stringify({
        resources: [{ identifier: "obs-2", payload_type: "annotation", label: 7, note: SECRETS[4] }],
      }),
    });
    expect(bad.status).toBe(400);
    await callRest(url, "POST", "/resources/read", { headers: { authorization: "Bearer wrong" }, body: "{}" });
    // A Connect JSON body that does not decode: connect's message and code, and still a call with a request id and a line.
    const connectPath = "/resourcestore.v2.ResourceService/Read";
    const badJson = await fetch(`${url}${connectPath}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: `{"identifiers":"${SECRETS[4]}"}`,
    });
    expect(badJson.status).toBe(400);
    const badJsonBody = (await badJson.json()) as { code: string; message: string };
    expect(badJsonBody.code).toBe("invalid_argument");
    expect(badJsonBody.message).toMatch(
      /^cannot decode field resourcestore\.type\.v1\.ReadRequest\.identifiers from JSON/,
    );
    const badJsonId = badJson.headers.get("x-request-id");
    expect(badJsonId).toMatch(/^[0-9a-f-]{36}$/);
    const notJson = await fetch(`${url}${connectPath}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json", "x-request-id": "req-not-json" },
      body: "{not json",
    });
    expect(notJson.status).toBe(400);
    expect(((await notJson.json()) as { code: string }).code).toBe("invalid_argument");
    expect(notJson.headers.get("x-request-id")).toBe("req-not-json");
    // With a deadline the call goes through connect's router, behind the body guard: the same.
    const withDeadline = await fetch(`${url}${connectPath}`, {
      method: "POST",
      headers: {
        ...auth,
        "content-type": "application/json",
        "connect-timeout-ms": "60000",
        "x-request-id": "req-not-json-deadline",
      },
      body: "{not json",
    });
    expect(withDeadline.status).toBe(400);
    expect(((await withDeadline.json()) as { code: string }).code).toBe("invalid_argument");
    expect(withDeadline.headers.get("x-request-id")).toBe("req-not-json-deadline");
    await callRpc(
      transportFor(url, "grpc"),
      ResourceService.method.create,
      create(CreateRequestSchema, {
        resources: [{ identifier: "obs-3", payload: { case: "annotation", value: { label: SECRETS[0] } } }],
      }),
      auth,
    );

    const records = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    const calls = records.filter((r) => r.msg === "call");
    const byId = calls.find((r) => r.request_id === mine);
    expect(byId).toMatchObject({
      rpc: "resourcestore.v2.ResourceService/Create",
      code: "ok",
      duration_ms: expect.any(Number),
    });
    expect(calls.find((r) => r.request_id === freshId)).toMatchObject({ rpc: "resourcestore.v2.ResourceService/Read" });
    expect(calls.some((r) => r.code === "Unauthenticated")).toBe(true);
    for (const id of [badJsonId, "req-not-json", "req-not-json-deadline"]) {
      expect(
        calls.filter((r) => r.request_id === id),
        `the call line of malformed Connect JSON ${id}`,
      ).toEqual([expect.objectContaining({ rpc: "resourcestore.v2.ResourceService/Read", code: "InvalidArgument" })]);
    }
    // Refused by the REST gateway before any RPC: the http line has it, with its id.
    const http = records.filter((r) => r.msg === "http");
    expect(
      http.some((r) => r.status === 400 && r.path === "/resources/create" && typeof r.request_id === "string"),
    ).toBe(true);
    // A REST request that is a call has one line: the call's, with the HTTP fields on it.
    expect(byId).toMatchObject({ method: "POST", path: "/resources/create", status: 200 });
    expect(records.filter((r) => r.request_id === mine)).toHaveLength(1);
    expect(calls.find((r) => r.request_id === freshId)).toMatchObject({
      method: "POST",
      path: "/resources/read",
      status: 200,
      code: "ok",
    });
    expect(http.some((r) => r.request_id === freshId)).toBe(false);
    // A call over gRPC has no HTTP fields of its own.
    expect(
      calls.find((r) => r.rpc === "resourcestore.v2.ResourceService/Create" && r.path === undefined),
    ).toBeDefined();
    for (const c of calls) expect(c.request_id).toEqual(expect.any(String));
    const all = lines.join("\n");
    for (const s of SECRETS) expect(all).not.toContain(s);
  });
});

describe("metrics", () => {
  it("counts calls by route and code with a latency histogram, over REST, Connect and gRPC", async () => {
    await callRest(url, "GET", "/schemas", { headers: auth });
    await callRpc(
      transportFor(url, "connect-json"),
      ResourceService.method.create,
      create(CreateRequestSchema, {}),
      auth,
    );
    await callRpc(transportFor(url, "grpc"), ResourceService.method.create, create(CreateRequestSchema, {}));
    const res = await fetch(`${url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/plain");
    const text = await res.text();
    const count = (route: string, code: string) => {
      const m = new RegExp(
        `^rs_requests_total\\{route="${route.replace(/\./g, "\\.")}",code="${code}"\\} (\\d+)`,
        "m",
      ).exec(text);
      return m ? Number(m[1]) : 0;
    };
    expect(count("/resourcestore.v2.SchemaService/Schemas", "ok")).toBeGreaterThanOrEqual(1);
    expect(count("/resourcestore.v2.ResourceService/Create", "ok")).toBeGreaterThanOrEqual(2);
    expect(count("/resourcestore.v2.ResourceService/Create", "unauthenticated")).toBeGreaterThanOrEqual(1);
    // The malformed Connect JSON bodies of the logs test are counted too.
    expect(count("/resourcestore.v2.ResourceService/Read", "invalid_argument")).toBeGreaterThanOrEqual(3);
    expect(text).toMatch(
      /^rs_request_duration_seconds_bucket\{le="0\.1",route="\/resourcestore\.v2\.SchemaService\/Schemas",code="ok"\} \d+/m,
    );
    expect(text).toMatch(
      /^rs_request_duration_seconds_count\{route="\/resourcestore\.v2\.ResourceService\/Create",code="ok"\} \d+/m,
    );
    expect(text).toMatch(/^process_cpu_seconds_total /m);
  });

  it("reports the change feed: open streams, history reads by tail and by stream, streams that left a tail by reason", async () => {
    const text = await (await fetch(`${url}/metrics`)).text();
    expect(text).toMatch(/^# TYPE rs_events_streams_open gauge$/m);
    expect(text).toMatch(/^rs_events_streams_open \d+$/m);
    expect(text).toMatch(/^# TYPE rs_events_history_reads_total counter$/m);
    for (const by of ["tail", "stream"])
      expect(text).toMatch(new RegExp(`^rs_events_history_reads_total\\{by="${by}"\\} \\d+$`, "m"));
    expect(text).toMatch(/^# TYPE rs_events_streams_left_tail_total counter$/m);
    for (const reason of ["lagging", "untagged", "error"]) {
      expect(text).toMatch(new RegExp(`^rs_events_streams_left_tail_total\\{reason="${reason}"\\} \\d+$`, "m"));
    }
    // The figures are the feed's (EventFeed.stats(), exact in test/events/feed-stats.test.ts): one open stream, which has read on its own.
    const ac = new AbortController();
    try {
      const res = await fetch(`${url}/events`, { headers: auth, signal: ac.signal });
      expect(res.status).toBe(200);
      await res.body!.getReader().read();
      const during = await (await fetch(`${url}/metrics`)).text();
      expect(Number(/^rs_events_streams_open (\d+)$/m.exec(during)?.[1])).toBe(1);
      expect(Number(/^rs_events_history_reads_total\{by="stream"\} (\d+)$/m.exec(during)?.[1])).toBeGreaterThanOrEqual(
        1,
      );
    } finally {
      ac.abort();
    }
  });

  it.skipIf(!pgOk)("reports the PostgreSQL pool", async () => {
    const text = await (await fetch(`${url}/metrics`)).text();
    for (const name of ["rs_db_pool_connections_total", "rs_db_pool_connections_idle", "rs_db_pool_requests_waiting"]) {
      expect(text).toMatch(new RegExp(`^${name} \\d+`, "m"));
    }
    expect(Number(/^rs_db_pool_connections_total (\d+)/m.exec(text)?.[1])).toBeGreaterThan(0);
  });
});

describe("registry keys (issue 20)", () => {
  it("no uid, hash or key in logs, metrics, refusals, the rehash progress or the parquet export", async () => {
    const uidA = "EXT-ROTATE-UID-77";
    const body = JSON.stringify({ datasource_id: "ds-rotate", external_uid: uidA });
    const reg = await callRest(url, "POST", "/patients/register", { headers: auth, body });
    expect(reg.status).toBe(200);
    const dup = await callRest(url, "POST", "/patients/register", { headers: auth, body });
    expect(dup.status).toBe(400);
    const hashOf = async () =>
      (await app.db.query<{ hash: string }>("SELECT encode(uid_hash, 'hex') AS hash FROM registry_patients")).rows.map(
        (r) => r.hash,
      );
    const before = await hashOf();

    // Rotation: the rehash reports counts only.
    const nextKey = randomBytes(32).toString("base64url");
    const keys = [
      { id: "next", secret: Buffer.from(nextKey) },
      { id: "default", secret: Buffer.from(TEST_REGISTRY_SECRET) },
    ];
    const progress: string[] = [];
    const done = await rehashRegistry(app.db, keys, { batchSize: 1, onBatch: (p) => progress.push(JSON.stringify(p)) });
    expect(done.patients).toBeGreaterThanOrEqual(2);
    const after = await hashOf();
    expect(after.some((h) => before.includes(h))).toBe(false);

    // Refusals at start-up name the variables, never a key.
    const refusals: string[] = [];
    if (app.db.capabilities.embedded === false) {
      await app.db.query("INSERT INTO registry_secret (id, secret) VALUES (true, $1)", [nextKey]);
      await loadRegistryKeys({
        configured: keys.map((k) => ({ id: k.id, secret: k.secret.toString() })),
        db: app.db,
        dataDir: undefined,
      }).catch((err: Error) => refusals.push(err.message));
      await app.db.query("DELETE FROM registry_secret");
      expect(refusals).toEqual([KEY_IN_DATABASE_MESSAGE]);
    }

    const parquet = await fetch(`${url}/query/parquet`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ payload_type: "annotation" }),
    });
    expect(parquet.status).toBe(200);
    const exported = Buffer.from(await parquet.arrayBuffer()).toString("latin1");
    const metrics = await (await fetch(`${url}/metrics`)).text();
    const seen = [lines.join("\n"), metrics, progress.join("\n"), dup.text, ...refusals, exported].join("\n");
    const hidden = [uidA, TEST_REGISTRY_SECRET, nextKey, ...before, ...after];
    for (const h of [...before, ...after])
      hidden.push(Buffer.from(h, "hex").toString("base64"), Buffer.from(h, "hex").toString("latin1"));
    for (const s of hidden) expect(seen).not.toContain(s);
  });
});
