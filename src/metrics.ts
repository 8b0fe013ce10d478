// Prometheus metrics at /metrics: calls by route and code with a latency
// histogram (recorded at each call's end by the pipeline, so REST, gRPC and
// Connect all count), the PostgreSQL pool, the change feed's streams and history reads,
// and the process defaults. One registry per
// app, so several apps in one process (tests) do not share counters.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { EventFeed, PoolStats, ReadCounts } from "./store/index.js";

export interface Metrics {
  readonly registry: Registry;
  readonly contentType: string;
  render(): Promise<string>;
  /**
   * Counts and times a call: every call's end is written here once, by the
   * pipeline's call interceptor or, for a call answered without it, by the
   * pipeline (src/rpc/interceptors.ts, createCallEnd).
   */
  record(route: string, code: string, seconds: number): void;
}

export interface MetricsDeps {
  /** The database pool, when there is one (PostgreSQL). */
  readonly poolStats?: (() => PoolStats) | undefined;
  /** Reads by where they ran, when there are read standbys (DATABASE_READ_URLS). */
  readonly readCounts?: (() => ReadCounts) | undefined;
  /** The change feed: its open streams, history reads and streams that left a tail (store/events.ts). */
  readonly feed?: Pick<EventFeed, "openStreams" | "stats"> | undefined;
}

export function createMetrics(deps: MetricsDeps = {}): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const labelNames = ["route", "code"] as const;
  const requests = new Counter({
    name: "rs_requests_total",
    help: "Calls answered, by route (/package.Service/Method) and code",
    labelNames,
    registers: [registry],
  });
  const duration = new Histogram({
    name: "rs_request_duration_seconds",
    help: "Call latency until the answer (or the end of a stream), by route and code",
    labelNames,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  const poolStats = deps.poolStats;
  if (poolStats !== undefined) {
    const gauge = (name: string, help: string, pick: (s: PoolStats) => number) =>
      new Gauge({
        name,
        help,
        registers: [registry],
        collect() {
          this.set(pick(poolStats()));
        },
      });
    gauge("rs_db_pool_connections_total", "PostgreSQL pool: open connections", (s) => s.total);
    gauge("rs_db_pool_connections_idle", "PostgreSQL pool: idle connections", (s) => s.idle);
    gauge("rs_db_pool_requests_waiting", "PostgreSQL pool: queries waiting for a connection", (s) => s.waiting);
  }

  const readCounts = deps.readCounts;
  if (readCounts !== undefined) {
    new Counter({
      name: "rs_db_reads_total",
      help: "Reads routed, by where they ran: primary, or a standby that had replayed the read point",
      labelNames: ["target"] as const,
      registers: [registry],
      collect() {
        const c = readCounts();
        this.reset();
        this.inc({ target: "primary" }, c.primary);
        this.inc({ target: "standby" }, c.standby);
      },
    });
  }

  const feed = deps.feed;
  if (feed !== undefined) {
    new Gauge({
      name: "rs_events_streams_open",
      help: "Change feed: open Watch and /events streams",
      registers: [registry],
      collect() {
        this.set(feed.openStreams);
      },
    });
    new Counter({
      name: "rs_events_history_reads_total",
      help: "Change feed: pages of history read, by who read them: a shared tail (once for all its streams) or a stream on its own (catching up, or after leaving its tail)",
      labelNames: ["by"] as const,
      registers: [registry],
      collect() {
        const s = feed.stats();
        this.reset();
        this.inc({ by: "tail" }, s.tailReads);
        this.inc({ by: "stream" }, s.streamReads);
      },
    });
    new Counter({
      name: "rs_events_streams_left_tail_total",
      help: "Change feed: streams that left their shared tail to read the history on their own until they rejoin, by reason: lagging (8 pages unread, or behind), untagged (its subtree not tagged), error (the tail's read failed)",
      labelNames: ["reason"] as const,
      registers: [registry],
      collect() {
        const left = feed.stats().leftTail;
        this.reset();
        for (const reason of ["lagging", "untagged", "error"] as const) this.inc({ reason }, left[reason]);
      },
    });
  }

  return {
    registry,
    contentType: registry.contentType,
    render: () => registry.metrics(),
    record(route, code, seconds) {
      duration.observe({ route, code }, seconds);
      requests.inc({ route, code });
    },
  };
}
