// The TypeScript client's watch(): an async iterator that resumes by itself
// after a dropped connection, from the last `at` it got: every event once.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createResourceStoreClient } from "../../src/client/index.js";
import { createResourceStore } from "../../src/store/index.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { startTcpProxy, type TcpProxy } from "../reliability/tcp-proxy.js";
import { LOCAL_CALLER } from "../../src/access/index.js";

let srv: TestServer;
let proxy: TcpProxy;
beforeAll(async () => {
  srv = await startTestServer({ EVENTS_HEARTBEAT_MS: "100", EVENTS_PAGE_SIZE: "2" });
  proxy = await startTcpProxy({ host: "127.0.0.1", port: srv.port });
}, 60_000);
afterAll(async () => {
  await proxy?.close();
  await srv?.close();
});

describe("client watch()", () => {
  it.each(["grpc", "connect", "grpc-web"] as const)(
    "over %s, resumes after the connection is cut, no gap and no duplicate",
    async (transport) => {
      const client = createResourceStoreClient({ baseUrl: `http://127.0.0.1:${proxy.port}`, transport });
      const store = createResourceStore(srv.app.db);
      const p = `cw-${transport}-`;
      const ac = new AbortController();
      const retries: string[] = [];
      const seen: string[] = [];
      const total = 12;
      // Heartbeats are yielded too: the first one says the stream is open.
      const watch = client.watch({
        signal: ac.signal,
        retryMs: 20,
        heartbeats: true,
        onRetry: (_e, since) => retries.push(since ?? ""),
      });
      const it = watch[Symbol.asyncIterator]();
      await it.next();
      for (let i = 0; i < total; i += 2) {
        await store.create(
          LOCAL_CALLER,
          [0, 1].map((j) => ({ identifier: `${p}${i + j}`, payloadType: "datasource", payload: { name: "n" } })),
        );
        while (seen.length < i + 2) {
          const next = await it.next();
          if (next.done === true) throw new Error("ended");
          for (const e of next.value.events) if (e.identifier.startsWith(p)) seen.push(e.identifier);
        }
        // Drop the connection; the next commit lands while it is down.
        proxy.cut();
        setTimeout(() => proxy.restore(), 50);
      }
      ac.abort();
      expect(seen).toEqual(Array.from({ length: total }, (_, i) => `${p}${i}`));
      expect(retries.length).toBeGreaterThan(0);
    },
    60_000,
  );
});
