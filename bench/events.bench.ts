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
// so the streams' clients do not share its event loop. They do share the
// machine's two cores, so they take of each message only what the figures
// need (its `at`, whether partial, how many events), straight from the
// protobuf wire format, and each stream is a plain HTTP/2 gRPC call that
// receives every byte of its messages on its own stream while each
// distinct message is inflated and read once for all of them (h2Call).
// With @grpc/grpc-js clients (BENCH_EVENTS_CLIENT=grpc-js, the line's
// client until the feed lane, src/rpc/feed-lane.ts) every stream inflated every 76 KB
// message itself, a hundred or a thousand times what one real client does:
// the bench process was busy 76% of a core at 100 streams and was what
// limited the line at 1,000 (docs/benchmarks/events.md, "Feed at 100 streams: the
// feed lane").
//
// After each case the service's own account follows, from its /metrics:
// history pages read by the shared tails and by streams on their own, and
// streams that left their tail by reason. One tail read per commit and
// few own reads means the streams shared the reads; own reads growing with
// commits times streams means they left the tail and each read alone.
import { EventEmitter } from "node:events";
import http2 from "node:http2";
import { gunzipSync } from "node:zlib";
import * as grpc from "@grpc/grpc-js";
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

/** What a bench client keeps of one WatchResponse: its `at`, whether partial, and how many events it holds. */
interface Seen {
  readonly at: string;
  readonly events: number;
  readonly partial: boolean;
}

/** Reads WatchResponse's fields 1 (at), 2 (events, counted, not decoded) and 3 (partial). */
function readSeen(buf: Buffer): Seen {
  let at = "";
  let events = 0;
  let partial = false;
  let i = 0;
  const varint = () => {
    let v = 0;
    let shift = 0;
    for (;;) {
      const b = buf[i++]!;
      v += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return v;
      shift += 7;
    }
  };
  while (i < buf.length) {
    const key = varint();
    const no = key >>> 3;
    const wire = key & 7;
    if (wire === 0) {
      const v = varint();
      if (no === 3) partial = v !== 0;
    } else if (wire === 2) {
      const len = varint();
      if (no === 1) at = buf.toString("latin1", i, i + len);
      else if (no === 2) events += 1;
      i += len;
    } else if (wire === 1) i += 8;
    else if (wire === 5) i += 4;
    else throw new Error(`wire type ${wire}`);
  }
  return { at, events, partial };
}

/** The part of a grpc-js call the bench uses: "data" (a Seen), "error", "end", and cancel(). */
interface BenchCall {
  on(event: "data", listener: (m: Seen) => void): this;
  on(event: "error", listener: (err: grpc.ServiceError) => void): this;
  on(event: "end", listener: () => void): this;
  once(event: "data", listener: (m: Seen) => void): this;
  once(event: "error", listener: (err: Error) => void): this;
  cancel(): void;
}

/**
 * A Watch as a plain HTTP/2 gRPC call (the headers grpc-js sends, gzip
 * accepted), each stream taking every byte of every message off its own
 * HTTP/2 stream, but decoding (gunzip, then readSeen) each distinct envelope
 * once for all the streams of the run (`decoded`, keyed by its bytes): what
 * one real client does for itself, done once here instead of once per
 * stream. A message counts for a stream only once all its bytes came on
 * that stream.
 */
function h2Call(session: http2.ClientHttp2Session, request: Buffer, decoded: Map<string, Seen>): BenchCall {
  const call = new EventEmitter() as EventEmitter & BenchCall;
  const req = session.request({
    ":method": "POST",
    ":path": "/resourcestore.v2.EventService/Watch",
    "content-type": "application/grpc",
    te: "trailers",
    "grpc-accept-encoding": "identity,deflate,gzip",
  });
  const framed = Buffer.alloc(5 + request.length);
  framed.writeUInt32BE(request.length, 1);
  request.copy(framed, 5);
  req.end(framed);
  let pending: Buffer = Buffer.alloc(0);
  req.on("data", (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    while (pending.length >= 5 && pending.length >= 5 + pending.readUInt32BE(1)) {
      const end = 5 + pending.readUInt32BE(1);
      const envelope = pending.subarray(0, end);
      pending = pending.subarray(end);
      const key = envelope.toString("latin1");
      let seen = decoded.get(key);
      if (seen === undefined) {
        const body = envelope.subarray(5);
        seen = readSeen((envelope[0]! & 1) === 1 ? gunzipSync(body) : body);
        if (decoded.size > 1000) decoded.clear();
        decoded.set(key, seen);
      }
      call.emit("data", seen);
    }
  });
  req.on("error", (err) => call.emit("error", Object.assign(err, { code: grpc.status.UNAVAILABLE })));
  req.on("close", () => call.emit("end"));
  call.cancel = () => req.close(http2.constants.NGHTTP2_CANCEL);
  return call;
}

/** The feed's counters from the service's /metrics, as one line of context. */
async function feedCounters(serverUrl: string): Promise<string> {
  const text = await (await fetch(`${serverUrl}/metrics`)).text();
  const value = (name: string, label: string) =>
    new RegExp(`^${name}\\{${label}\\} (\\S+)$`, "m").exec(text)?.[1] ?? "?";
  const reads = (by: string) => value("rs_events_history_reads_total", `by="${by}"`);
  const left = (reason: string) => value("rs_events_streams_left_tail_total", `reason="${reason}"`);
  return `history reads by tail ${reads("tail")}, by stream ${reads("stream")}; streams that left the tail: lagging ${left("lagging")}, untagged ${left("untagged")}, error ${left("error")}`;
}

async function withStreams(opts: BenchOptions, streams: number): Promise<Result[]> {
  // Every event goes to every stream: fewer rows for a thousand streams.
  const total = (opts.quick ? 10_000 : 50_000) / (streams >= 1000 ? 5 : 1);
  const batch = 1000;
  return withDatabase(async ({ url }) => {
    const server = await startServer({ databaseUrl: url, env: { MAX_WATCH_STREAMS: String(streams + 10) } });
    const writerDb = await openDatabase({ databaseUrl: url, poolSize: 2 });
    const address = new URL(server.url).host;
    const h2 = process.env.BENCH_EVENTS_CLIENT !== "grpc-js";
    // One connection per hundred streams (for grpc-js, a distinct option keeps it from sharing one channel).
    const sessions = h2
      ? Array.from({ length: Math.ceil(streams / STREAMS_PER_CONNECTION) }, () => http2.connect(server.url))
      : [];
    const clients = Array.from(
      { length: h2 ? 0 : Math.ceil(streams / STREAMS_PER_CONNECTION) },
      (_, i) =>
        new grpc.Client(address, grpc.credentials.createInsecure(), {
          "bench.connection": i,
          "grpc.max_receive_message_length": 64 * 1024 * 1024,
        }),
    );
    const decoded = new Map<string, Seen>();
    const calls: BenchCall[] = [];
    try {
      const store = createResourceStore(writerDb);
      const committedAt = new Map<string, number>();
      const delays: number[] = [];
      const request = Buffer.from(toBinary(WatchRequestSchema, create(WatchRequestSchema, {})));
      const lastDelivery: number[] = Array.from({ length: streams }, () => 0);
      // Each stream: opened once its first message (the read point) came; done once it has every event.
      const opened: Promise<void>[] = [];
      const readers: Promise<number>[] = [];
      for (let s = 0; s < streams; s++) {
        const c = Math.floor(s / STREAMS_PER_CONNECTION);
        const call: BenchCall = h2
          ? h2Call(sessions[c]!, request, decoded)
          : clients[c]!.makeServerStreamRequest(
              "/resourcestore.v2.EventService/Watch",
              (b: Buffer) => b,
              readSeen,
              request,
            );
        calls.push(call);
        let delivered = 0;
        let first = true;
        opened.push(
          new Promise((resolve, reject) => {
            call.once("data", () => resolve());
            call.once("error", reject);
          }),
        );
        readers.push(
          new Promise((resolve, reject) => {
            call.on("data", (m: Seen) => {
              if (first) {
                first = false;
                return;
              }
              const now = performance.now();
              delivered += m.events;
              if (m.events > 0) lastDelivery[s] = now;
              const t = m.partial ? undefined : committedAt.get(m.at);
              if (t !== undefined) delays.push(now - t);
              if (delivered >= total) resolve(delivered);
            });
            call.on("error", (err: grpc.ServiceError) =>
              err.code === grpc.status.CANCELLED ? resolve(delivered) : reject(err),
            );
            call.on("end", () => resolve(delivered));
          }),
        );
      }
      await Promise.all(opened);
      const started = performance.now();
      let firstCommit = 0;
      for (let i = 0; i < total; i += batch) {
        const { at } = await store.create(
          LOCAL_CALLER,
          Array.from({ length: batch }, (_, j) => ({
            identifier: `ev-${i}-${j}`,
            payloadType: "annotation",
            payload: { label: "bench", value: j },
          })),
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
      context(
        `${streams} stream(s), ${Math.ceil(total / batch)} commits, per the service's /metrics: ${await feedCounters(server.url)}`,
      );
      const out: Result[] = [
        {
          name: `events delivered/s per stream vs writer rows/s, ${streams} stream${streams === 1 ? "" : "s"}`,
          ratio: slowest / writeRate,
          op: ">=",
          target: streams <= 100 ? 1 : 0.5,
        },
      ];
      if (streams === 100)
        out.push({
          name: "commit-to-delivery p99 at 100 streams vs 1 s",
          ratio: p99 / DELAY_P99_BOUND_MS,
          op: "<=",
          target: 1,
        });
      return out;
    } finally {
      for (const c of calls) c.cancel();
      for (const c of clients) c.close();
      for (const c of sessions) c.close();
      await writerDb.close();
      await server.close();
    }
  });
}
