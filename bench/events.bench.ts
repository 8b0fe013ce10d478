// The change feed keeps up with the writes, with 1, 100 and 1,000 open
// streams: a writer creates in batches (through the store, on its own pool,
// as another service process would) while the streams on the service take
// events over gRPC. The ratio is the slowest stream's events/s over the
// writer's rows/s (target >= 1 at 100 streams: the feed is not the
// bottleneck; one shared history read per commit serves them all); the
// delay from a batch's commit to its delivery is printed as context (p50,
// p99 over every stream), and held to a bound at 100 streams.
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { EventService } from "../gen/resourcestore/v2/event_service_pb.js";
import { createApp } from "../src/app.js";
import { loadConfig } from "../src/config.js";
import { createLogger } from "../src/log.js";
import { startServer } from "../src/server.js";
import { createResourceStore, openDatabase } from "../src/store/index.js";
import { randomBytes } from "node:crypto";
import { setMaxListeners } from "node:events";
import type { BenchOptions } from "./options.js";
import { withDatabase } from "./support/database.js";
import { context, fmt, percentile, type Result } from "./support/measure.js";
import { LOCAL_CALLER } from "../src/access/index.js";

/** Streams per HTTP/2 connection: well under the server's concurrent-stream limit. */
const STREAMS_PER_CONNECTION = 100;
/** The p99 commit-to-delivery delay at 100 streams must stay under this (ms). */
const DELAY_P99_BOUND_MS = 1000;

export async function eventsBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const results: Result[] = [];
  for (const streams of [1, 100, 1000]) results.push(...(await withStreams(opts, streams)));
  return results;
}

async function withStreams(opts: BenchOptions, streams: number): Promise<Result[]> {
  // Every event goes to every stream, and the clients share this process with the server and the writer: fewer rows for a thousand streams.
  const total = (opts.quick ? 10_000 : 50_000) / (streams >= 1000 ? 5 : 1);
  const batch = 1000;
  return withDatabase(async ({ url }) => {
    // On PostgreSQL the registry key must be given (it never lives in the database): one for this run.
    const config = loadConfig({ PORT: "0", DATABASE_URL: url, LOG_LEVEL: "silent", REGISTRY_SECRET: randomBytes(32).toString("base64url"), MAX_WATCH_STREAMS: String(streams + 10) });
    const app = await createApp(config, createLogger("silent"));
    const server = await startServer({ port: 0, host: "127.0.0.1", handler: app.handler });
    const writerDb = await openDatabase({ databaseUrl: url, poolSize: 2 });
    const ac = new AbortController();
    // Every stream of this run listens on it.
    setMaxListeners(0, ac.signal);
    try {
      const store = createResourceStore(writerDb);
      const clients = Array.from({ length: Math.ceil(streams / STREAMS_PER_CONNECTION) }, () =>
        createClient(EventService, createGrpcTransport({ baseUrl: `http://127.0.0.1:${server.port}` })),
      );
      const committedAt = new Map<string, number>();
      const delays: number[] = [];
      const opened = await Promise.all(
        Array.from({ length: streams }, async (_, i) => {
          const stream = clients[Math.floor(i / STREAMS_PER_CONNECTION)]!.watch({}, { signal: ac.signal })[Symbol.asyncIterator]();
          await stream.next(); // open: the first message is the read point
          return stream;
        }),
      );
      const lastDelivery: number[] = opened.map(() => 0);
      const readers = opened.map(async (stream, s) => {
        let delivered = 0;
        while (delivered < total) {
          const next = await stream.next();
          if (next.done === true) break;
          const now = performance.now();
          for (const e of next.value.events) {
            delivered += 1;
            const t = committedAt.get(e.at);
            if (t !== undefined && e.identifier.endsWith("-0")) delays.push(now - t);
          }
          lastDelivery[s] = now;
        }
        return delivered;
      });
      const started = performance.now();
      let firstCommit = 0;
      for (let i = 0; i < total; i += batch) {
        const { at } = await store.create(
          LOCAL_CALLER, Array.from({ length: batch }, (_, j) => ({ identifier: `ev-${i}-${j}`, payloadType: "annotation", payload: { label: "bench", value: j } })),
        );
        committedAt.set(at, performance.now());
        firstCommit ||= performance.now();
      }
      const writeSeconds = (performance.now() - started) / 1000;
      const delivered = await Promise.all(readers);
      // A stream's window opens at the first commit (nothing to deliver
      // before it) and closes at its last delivery (so it pays the last delay).
      const rates = delivered.map((n, s) => n / ((lastDelivery[s]! - firstCommit) / 1000));
      const slowest = Math.min(...rates);
      const writeRate = total / writeSeconds;
      const p99 = percentile(delays, 99);
      context(
        `${streams} stream(s): writer ${fmt(writeRate)} rows/s in batches of ${batch}; slowest stream ${fmt(slowest)} events/s, all streams ${fmt(rates.reduce((a, b) => a + b, 0))} events/s; ` +
          `commit to delivery p50 ${fmt(percentile(delays, 50), 1)} ms, p99 ${fmt(p99, 1)} ms`,
      );
      const out: Result[] = [
        { name: `events delivered/s per stream vs writer rows/s, ${streams} stream${streams === 1 ? "" : "s"}`, ratio: slowest / writeRate, op: ">=", target: streams <= 100 ? 1 : 0.5 },
      ];
      if (streams === 100) out.push({ name: "commit-to-delivery p99 at 100 streams vs 1 s", ratio: p99 / DELAY_P99_BOUND_MS, op: "<=", target: 1 });
      return out;
    } finally {
      ac.abort();
      await writerDb.close();
      await Promise.all([app.endStreams(), server.close(1000)]);
      await app.close();
    }
  });
}
