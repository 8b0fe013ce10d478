// Reads routed to a hot standby. `replica-read-overhead` is
// the median latency of an as_of read of 100 resources through a service
// with DATABASE_READ_URLS (served by the standby) over the same read through
// a service on the primary alone (target <= 1.1). As context: the replay lag
// p99 while the create load runs, and the per-read costs docs/benchmarks/replica.md turns
// into the throughput a second machine would add (a calculation).
//
// The primary and the standby are built here from the machine's PostgreSQL
// binaries (test/support/pg-cluster.ts), not the server `npm run bench`
// otherwise uses.
import { randomBytes } from "node:crypto";
import { createResourceStoreClient } from "../src/client/index.js";
import { readResources } from "../src/store/index.js";
import { findPostgresBin, startPgCluster } from "../test/support/pg-cluster.js";
import { captureStatements } from "./support/capture.js";
import { connect } from "./support/database.js";
import { context, fmt, median, percentile, type Result } from "./support/measure.js";
import { clockNow, loadThroughStoreSql, migrateDatabase } from "./support/load.js";
import { processCpuMs, startServer } from "./support/server.js";
import { batchAt, resourceAt, toMessage } from "./support/workload.js";
import type { BenchOptions } from "./options.js";
import { ALL_GRANTS } from "../src/access/index.js";

export const REPLICA_READ_TARGET = 1.1;

function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

export async function replicaBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const bin = findPostgresBin();
  if (bin === undefined)
    throw new Error("no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup) found; set PG_BIN");
  const batchSize = 1000;
  const batches = opts.quick ? 20 : 100;
  const total = batches * batchSize;
  const calls = opts.quick ? 100 : 400;
  const perRead = 100;
  const createBatches = opts.quick ? 20 : 60;
  context(
    `replica: ${fmt(total)} resources on a primary and a streaming hot standby on this machine; ${perRead} random identifiers an as_of read, ${calls} reads a variant`,
  );
  const cluster = await startPgCluster(bin, "bench");
  try {
    await migrateDatabase(cluster.primaryUrl);
    await loadThroughStoreSql(cluster.primaryUrl, "r", batches, batchSize);
    const asOf = await clockNow(cluster.primaryUrl);
    // Closed in reverse order, whatever fails: a client left open when the cluster stops ends the run with its own error instead.
    const closers: (() => Promise<unknown>)[] = [];
    const admin = await connect(cluster.primaryUrl);
    closers.push(() => admin.end());
    await admin.query("ANALYZE");
    await cluster.caughtUp(120_000);
    // Two services of one store: one registry key (the second refuses a key of the same id with another fingerprint).
    const REGISTRY_SECRET = randomBytes(32).toString("base64url");
    try {
      const direct = await startServer({ databaseUrl: cluster.primaryUrl, env: { REGISTRY_SECRET } });
      closers.push(() => direct.close());
      const routed = await startServer({
        databaseUrl: cluster.primaryUrl,
        env: { REGISTRY_SECRET, DATABASE_READ_URLS: cluster.standbyUrl },
      });
      closers.push(() => routed.close());
      const onStandby = await connect(cluster.standbyUrl);
      closers.push(() => onStandby.end());
      const directClient = createResourceStoreClient({ baseUrl: direct.url, transport: "grpc" });
      const routedClient = createResourceStoreClient({ baseUrl: routed.url, transport: "grpc" });
      const rnd = random(18);
      const idSets = Array.from({ length: calls * 2 }, () => {
        const ids = new Set<string>();
        while (ids.size < perRead) ids.add(resourceAt("r", Math.floor(rnd() * total), batchSize).identifier);
        return [...ids];
      });
      // An as_of read is two statements (src/store/read.ts): the read point, then the read at it.
      const asOfSql = await Promise.all(
        idSets.map((ids) => captureStatements((d) => readResources(d, ALL_GRANTS, ids, { asOf }))),
      );
      const runAsOf = async (q: typeof admin, i: number): Promise<number> => {
        const [point, read] = asOfSql[i]!;
        const { rows } = await q.query<{ t: string }>(point!.sql, point!.params);
        return (await q.query(read!.sql, [read!.params![0], rows[0]?.t])).rows.length;
      };
      const variants: { name: string; run: (i: number) => Promise<number> }[] = [
        {
          name: "service on the primary",
          run: async (i) => (await directClient.resources.read({ identifiers: idSets[i]!, asOf })).resources.length,
        },
        {
          name: "service routed to the standby",
          run: async (i) => (await routedClient.resources.read({ identifiers: idSets[i]!, asOf })).resources.length,
        },
        { name: "pg on the primary", run: (i) => runAsOf(admin, i) },
        { name: "pg on the standby", run: (i) => runAsOf(onStandby, i) },
      ];
      const times = new Map(variants.map((v) => [v.name, [] as number[]]));
      const cpu = new Map<string, number>();
      const warm = calls / 10;
      for (let i = 0; i < calls + warm; i++) {
        if (i === warm) {
          cpu.set("direct", await processCpuMs(direct.pid));
          cpu.set("routed", await processCpuMs(routed.pid));
        }
        for (const v of variants) {
          const start = process.hrtime.bigint();
          const n = await v.run(i);
          const ms = Number(process.hrtime.bigint() - start) / 1e6;
          if (n !== perRead) throw new Error(`${v.name} returned ${n} resources, expected ${perRead}`);
          if (i >= warm) times.get(v.name)!.push(ms);
        }
      }
      const serviceCpu = (name: string, pid: number) => async () =>
        ((await processCpuMs(pid)) - cpu.get(name)!) / calls;
      const directCpu = await serviceCpu("direct", direct.pid)();
      const routedCpu = await serviceCpu("routed", routed.pid)();
      const metrics = await (await fetch(`${routed.url}/metrics`)).text();
      const standbyReads = Number(/^rs_db_reads_total\{target="standby"\} (\d+)$/m.exec(metrics)?.[1] ?? NaN);
      if (!(standbyReads >= calls))
        throw new Error(`the routed service ran ${standbyReads} reads on the standby, expected at least ${calls}`);
      const med = (name: string) => median(times.get(name)!);
      for (const v of variants)
        context(`${v.name}: median ${fmt(med(v.name), 2)} ms, p95 ${fmt(percentile(times.get(v.name)!, 95), 2)} ms`);
      context(
        `service CPU a read: ${fmt(directCpu, 2)} ms on the primary alone, ${fmt(routedCpu, 2)} ms routed (10 ms ticks over ${calls} reads)`,
      );
      context(`reads on the standby per /metrics: ${standbyReads}`);

      // Replay lag under the create benchmark's load (batches of 1000 over gRPC), sampled from pg_stat_replication.
      const lags: number[] = [];
      let loading = true;
      const sampler = (async () => {
        while (loading) {
          const { rows } = await admin.query<{ ms: number | null }>(
            "SELECT (extract(epoch FROM replay_lag) * 1000)::float8 AS ms FROM pg_stat_replication",
          );
          if (rows[0]?.ms !== null && rows[0]?.ms !== undefined) lags.push(rows[0].ms);
          await new Promise((r) => setTimeout(r, 20));
        }
      })();
      const t0 = Date.now();
      for (let b = 0; b < createBatches; b++) {
        await routedClient.resources.create({ resources: batchAt("c", b, batchSize).map(toMessage) });
      }
      const seconds = (Date.now() - t0) / 1000;
      loading = false;
      await sampler;
      const lagP99 = lags.length > 0 ? percentile(lags, 99) : NaN;
      context(
        `replay lag under create load (${fmt((createBatches * batchSize) / seconds)} rows/s for ${fmt(seconds, 1)} s): p50 ${fmt(lags.length > 0 ? median(lags) : NaN, 1)} ms, p99 ${fmt(lagP99, 1)} ms over ${lags.length} samples`,
      );
      return [
        {
          name: "replica-read-overhead",
          ratio: med("service routed to the standby") / med("service on the primary"),
          op: "<=",
          target: REPLICA_READ_TARGET,
        },
      ];
    } finally {
      for (const close of closers.reverse()) await close();
    }
  } finally {
    await cluster.stop();
  }
}
