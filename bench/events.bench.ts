// The change feed keeps up with the writes, with 1, 100 and 1,000 open
// streams: a writer creates in batches (through the store, on its own pool,
// as another service process would) while the streams on the service take
// events over gRPC. The ratio is the slowest stream's events/s over the
// writer's rows/s (target >= 1 at 100 streams: the feed is not the
// bottleneck; one shared history read per commit serves them all); the
// delay from a batch's commit to its delivery is printed as context (p50,
// p99 over every stream), and held to a bound at 100 streams.
//
// The windows are defined alike: each opens when its first input exists
// and closes at its last output. The writer's rows exist from the start and
// its last output is its last commit; a stream's first input is the first
// commit and its last output its last delivery. With n batches of write
// time b and a delay d from a commit to the slowest stream, the ratio is
// n·b / ((n-1)·b + d): >= 1 exactly when d <= b, the last commit reaching
// every stream within one batch's write time. A feed that falls behind
// reads < 1: if a commit costs the feed b' > b, the last one cannot reach
// a stream sooner than b' after it was committed (d >= b' > b), and its
// lag grows by b' - b a batch. (Counting both windows from their first
// output instead would read 1 for any feed that keeps pace, however late,
// and more than 1 for one that was slow only at first.)
//
// The service runs as `npm start` does, in a process of its own
// (support/server.ts; BENCH_SERVER_NODE_ARGS="--cpu-prof ..." profiles it),
// so the streams' clients do not share its event loop. The clients are
// @grpc/grpc-js calls that read of each message only what the figures need
// (its `at` and how many events it holds), straight from the protobuf wire
// format: a thousand clients each decoding every event in full would be a
// benchmark of protobuf decoding in this process, on the same two cores.
// They run in worker threads (support/watch-clients.mjs; four, or
// BENCH_EVENTS_CLIENT_THREADS), not on the writer's event loop: 100
// clients each gunzip every message (100 times what one real client does),
// and on one loop, between the writer's batches, the slowest stream was the
// one the loop reached last (BENCHMARKS.md, "Feed at 100 streams, the
// lane"). Times are epoch milliseconds (performance.timeOrigin + now), the
// same clock in every thread.
import { Worker } from "node:worker_threads";
import { create, toBinary } from "@bufbuild/protobuf";
import { WatchRequestSchema } from "../gen/resourcestore/type/v1/event_pb.js";
import { createResourceStore, openDatabase } from "../src/store/index.js";
import type { BenchOptions } from "./options.js";
import { withDatabase } from "./support/database.js";
import { context, fmt, percentile, type Result } from "./support/measure.js";
import { startServer } from "./support/server.js";
import { LOCAL_CALLER } from "../src/access/index.js";

/** Streams per HTTP/2 connection: the server's concurrent-stream limit (MAX_CONCURRENT_STREAMS, default 100). */
const STREAMS_PER_CONNECTION = 100;
/** The p99 commit-to-delivery delay at 100 streams must stay under this (ms). */
const DELAY_P99_BOUND_MS = 1000;

export async function eventsBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const results: Result[] = [];
  // BENCH_EVENTS_STREAMS=100 runs one case (to profile it).
  const counts = (process.env.BENCH_EVENTS_STREAMS ?? "1,100,1000").split(",").map(Number);
  for (const streams of counts) results.push(...(await withStreams(opts, streams)));
  return results;
}

/** Stream client threads (BENCH_EVENTS_CLIENT_THREADS, default 4; at most one per stream). */
function clientThreads(streams: number): number {
  return Math.max(1, Math.min(streams, Number(process.env.BENCH_EVENTS_CLIENT_THREADS ?? 4)));
}

/** What a client thread reports of one stream: events taken, the time of the last (epoch ms), and when each whole commit came. */
interface StreamSeen {
  readonly delivered: number;
  readonly last: number;
  readonly seen: [at: string, epochMs: number][];
}

/** A client thread (support/watch-clients.mjs) with its share of the streams. */
function clientThread(data: { id: number; address: string; streams: number; total: number; request: Uint8Array }) {
  const worker = new Worker(new URL("./support/watch-clients.mjs", import.meta.url), { workerData: { ...data, perConnection: STREAMS_PER_CONNECTION } });
  let openedResolve!: () => void;
  let fail!: (err: Error) => void;
  const failed = new Promise<never>((_, reject) => (fail = reject));
  failed.catch(() => undefined);
  const opened = new Promise<void>((resolve) => (openedResolve = resolve));
  const done = new Promise<StreamSeen[]>((resolve) => {
    worker.on("message", (m: { opened?: true; done?: StreamSeen[]; error?: string }) => {
      if (m.opened) openedResolve();
      if (m.done) resolve(m.done);
      if (m.error !== undefined) fail(new Error(m.error));
    });
  });
  worker.on("error", (err) => fail(err));
  return {
    opened: Promise.race([opened, failed]),
    done: Promise.race([done, failed]),
    async stop() {
      worker.postMessage("stop");
      await Promise.race([done, failed]).catch(() => undefined);
      await worker.terminate();
    },
  };
}

async function withStreams(opts: BenchOptions, streams: number): Promise<Result[]> {
  // Every event goes to every stream: fewer rows for a thousand streams.
  const total = (opts.quick ? 10_000 : 50_000) / (streams >= 1000 ? 5 : 1);
  const batch = 1000;
  return withDatabase(async ({ url }) => {
    const server = await startServer({ databaseUrl: url, env: { MAX_WATCH_STREAMS: String(streams + 10) } });
    const writerDb = await openDatabase({ databaseUrl: url, poolSize: 2 });
    const address = new URL(server.url).host;
    const request = toBinary(WatchRequestSchema, create(WatchRequestSchema, {}));
    const n = clientThreads(streams);
    const threads = Array.from({ length: n }, (_, i) =>
      clientThread({ id: i, address, streams: Math.floor(streams / n) + (i < streams % n ? 1 : 0), total, request }),
    );
    try {
      const store = createResourceStore(writerDb);
      // Epoch milliseconds, as the client threads report theirs.
      const now = () => performance.timeOrigin + performance.now();
      const committedAt = new Map<string, number>();
      // Each stream is open once its first message (the read point) came.
      await Promise.all(threads.map((t) => t.opened));
      const started = now();
      let firstCommit = 0;
      for (let i = 0; i < total; i += batch) {
        const { at } = await store.create(
          LOCAL_CALLER, Array.from({ length: batch }, (_, j) => ({ identifier: `ev-${i}-${j}`, payloadType: "annotation", payload: { label: "bench", value: j } })),
        );
        const t = now();
        committedAt.set(at, t);
        firstCommit ||= t;
      }
      const lastCommit = now();
      const seen = (await Promise.all(threads.map((t) => t.done))).flat();
      const delays = seen.flatMap((s) => s.seen.flatMap(([at, t]) => {
        const c = committedAt.get(at);
        return c === undefined ? [] : [t - c];
      }));
      // Symmetric windows: each opens when its first input exists and closes
      // at its last output. The writer's rows exist from the start, and its
      // last output is the last commit; a stream's first input is the first
      // commit, and its last output the last delivery (so it pays the last
      // commit's delay once, as the writer pays its first batch's time).
      const writeRate = total / ((lastCommit - started) / 1000);
      const rates = seen.map((s) => s.delivered / ((s.last - firstCommit) / 1000));
      const slowest = Math.min(...rates);
      const p99 = percentile(delays, 99);
      context(
        `${streams} stream(s) on ${n} client thread(s): writer ${fmt(writeRate)} rows/s in batches of ${batch}; slowest stream ${fmt(slowest)} events/s, all streams ${fmt(rates.reduce((a, b) => a + b, 0))} events/s; ` +
          `commit to delivery p50 ${fmt(percentile(delays, 50), 1)} ms, p99 ${fmt(p99, 1)} ms`,
      );
      const out: Result[] = [
        { name: `events delivered/s per stream vs writer rows/s, ${streams} stream${streams === 1 ? "" : "s"}`, ratio: slowest / writeRate, op: ">=", target: streams <= 100 ? 1 : 0.5 },
      ];
      if (streams === 100) out.push({ name: "commit-to-delivery p99 at 100 streams vs 1 s", ratio: p99 / DELAY_P99_BOUND_MS, op: "<=", target: 1 });
      return out;
    } finally {
      await Promise.all(threads.map((t) => t.stop()));
      await writerDb.close();
      await server.close();
    }
  });
}
