// PostgreSQL unreachable (a cut TCP proxy, not a stopped server): calls
// answer 503 unavailable over REST and unavailable over Connect, /readyz
// fails; once the network is back the same process serves again, and every
// write that was acknowledged is there.
import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReadRequestSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { callRest, callRpc, transportFor } from "../security/calls.js";
import { startTcpProxy, type TcpProxy } from "./tcp-proxy.js";

const pgOk = await postgresReachable();
let db: TestDatabase;
let proxy: TcpProxy;
let srv: TestServer;

beforeAll(async () => {
  if (!pgOk) return;
  db = await createTestDatabase();
  const url = new URL(db.url);
  proxy = await startTcpProxy({ host: url.hostname, port: Number(url.port || 5432) });
  url.hostname = "127.0.0.1";
  url.port = String(proxy.port);
  srv = await startTestServer({ DATABASE_URL: url.toString(), DATABASE_POOL_SIZE: "4" });
}, 60_000);
afterAll(async () => {
  await srv?.close();
  await proxy?.close();
  await db?.drop();
});

const create1 = (identifier: string) =>
  callRest(srv.url, "POST", "/resources/create", {
    body: JSON.stringify({ resources: [{ identifier, payload_type: "annotation", label: "l" }] }),
  });

async function until(cond: () => Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe.skipIf(!pgOk)("database outage", () => {
  it("answers unavailable while cut, recovers without a restart, loses nothing acknowledged", async () => {
    const acked: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await create1(`before-${i}`);
      expect(r.status).toBe(200);
      acked.push(`before-${i}`);
    }

    // A writer that keeps going through the outage.
    let writing = true;
    let n = 0;
    const outcomes = new Map<number, number>();
    const writer = (async () => {
      while (writing) {
        const id = `during-${n++}`;
        const r = await create1(id);
        outcomes.set(r.status, (outcomes.get(r.status) ?? 0) + 1);
        if (r.status === 200) acked.push(id);
        else expect([r.status, (r.json as { code: string }).code]).toEqual([503, "unavailable"]);
      }
    })();

    await new Promise((r) => setTimeout(r, 300));
    proxy.cut();
    await new Promise((r) => setTimeout(r, 300));

    const write = await create1("while-down");
    expect([write.status, write.json]).toEqual([
      503,
      { code: "unavailable", message: expect.any(String), reason: "DATABASE_UNAVAILABLE" },
    ]);
    const read = await callRest(srv.url, "POST", "/resources/read", {
      body: JSON.stringify({ identifiers: ["before-0"] }),
    });
    expect(read.status).toBe(503);
    const rpc = await callRpc(
      transportFor(srv.url, "connect-json"),
      ResourceService.method.read,
      create(ReadRequestSchema, { identifiers: ["before-0"] }),
    );
    expect(rpc.code).toBe(Code.Unavailable);
    const grpc = await callRpc(
      transportFor(srv.url, "grpc"),
      ResourceService.method.read,
      create(ReadRequestSchema, { identifiers: ["before-0"] }),
    );
    expect(grpc.code).toBe(Code.Unavailable);
    expect((await fetch(`${srv.url}/readyz`)).status).toBe(503);
    expect((await fetch(`${srv.url}/healthz`)).status).toBe(200);

    proxy.restore();
    await until(async () => (await fetch(`${srv.url}/readyz`)).status === 200, 20_000);
    await until(async () => (await create1(`after-${n++}`)).status === 200, 20_000);
    writing = false;
    await writer;
    expect(outcomes.get(503) ?? 0).toBeGreaterThan(0);

    const back = await callRest(srv.url, "POST", "/resources/read", {
      body: JSON.stringify({ identifiers: acked, exclude_children: true }),
    });
    expect(back.status).toBe(200);
    expect((back.json as { identifier: string }[]).map((r) => r.identifier)).toEqual(acked);
    const refused = await callRest(srv.url, "POST", "/resources/read", {
      body: JSON.stringify({ identifiers: ["while-down"] }),
    });
    expect(refused.json).toEqual([]);
  }, 90_000);
});
