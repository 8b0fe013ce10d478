// The change feed keeps up with the writes: a writer creates in batches
// (through the store, on its own pool, as another service process would)
// while a watcher on the service takes events over gRPC. The ratio is the
// events/s delivered to the watcher over the writer's rows/s (target >= 1:
// the feed is not the bottleneck); the delay from a batch's commit to its
// delivery is printed as context (p50, p99).
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { EventService } from "../gen/resourcestore/v2/event_service_pb.js";
import { createApp } from "../src/app.js";
import { loadConfig } from "../src/config.js";
import { createLogger } from "../src/log.js";
import { startServer } from "../src/server.js";
import { createResourceStore, openDatabase } from "../src/store/index.js";
import { randomBytes } from "node:crypto";
import type { BenchOptions } from "./options.js";
import { withDatabase } from "./support/database.js";
import { context, fmt, percentile, type Result } from "./support/measure.js";

export async function eventsBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const total = opts.quick ? 20_000 : 100_000;
  const batch = 1000;
  return withDatabase(async ({ url }) => {
    // On PostgreSQL the registry key must be given (it never lives in the database): one for this run.
    const config = loadConfig({ PORT: "0", DATABASE_URL: url, LOG_LEVEL: "silent", REGISTRY_SECRET: randomBytes(32).toString("base64url") });
    const app = await createApp(config, createLogger("silent"));
    const server = await startServer({ port: 0, host: "127.0.0.1", handler: app.handler });
    const writerDb = await openDatabase({ databaseUrl: url, poolSize: 2 });
    try {
      const store = createResourceStore(writerDb);
      const client = createClient(EventService, createGrpcTransport({ baseUrl: `http://127.0.0.1:${server.port}` }));
      const committedAt = new Map<string, number>();
      const delays: number[] = [];
      const ac = new AbortController();
      const stream = client.watch({}, { signal: ac.signal })[Symbol.asyncIterator]();
      await stream.next(); // open: the first message is the read point
      let delivered = 0;
      let lastDelivery = 0;
      const reader = (async () => {
        while (delivered < total) {
          const next = await stream.next();
          if (next.done === true) break;
          const now = performance.now();
          for (const e of next.value.events) {
            delivered += 1;
            const t = committedAt.get(e.at);
            if (t !== undefined) {
              delays.push(now - t);
              committedAt.delete(e.at);
            }
          }
          lastDelivery = now;
        }
      })();
      const started = performance.now();
      let firstCommit = 0;
      for (let i = 0; i < total; i += batch) {
        const { at } = await store.create(
          Array.from({ length: batch }, (_, j) => ({ identifier: `ev-${i + j}`, payloadType: "annotation", payload: { label: "bench", value: j } })),
        );
        committedAt.set(at, performance.now());
        firstCommit ||= performance.now();
      }
      const writeSeconds = (performance.now() - started) / 1000;
      await reader;
      ac.abort();
      // The watcher's window opens at the first commit (nothing to deliver
      // before it) and closes at its last delivery (so it pays the last delay).
      const deliverSeconds = (lastDelivery - firstCommit) / 1000;
      const writeRate = total / writeSeconds;
      const deliverRate = delivered / deliverSeconds;
      context(`writer ${fmt(writeRate)} rows/s in batches of ${batch}; watcher ${fmt(deliverRate)} events/s (${fmt(delivered)} events)`);
      context(`commit to delivery: p50 ${fmt(percentile(delays, 50), 1)} ms, p99 ${fmt(percentile(delays, 99), 1)} ms`);
      return [{ name: "events delivered/s vs writer rows/s", ratio: deliverRate / writeRate, op: ">=", target: 1 }];
    } finally {
      await writerDb.close();
      await Promise.all([app.endStreams(), server.close(1000)]);
      await app.close();
    }
  });
}
