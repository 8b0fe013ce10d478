// One route of the load benchmark on its own, for profiling: the same data
// and requests as bench/load.bench.ts, autocannon at 50 connections, and the
// server's own CPU time per call (utime+stime from /proc over the drive).
//   npx tsx bench/load-route.ts read-connect 8
//   BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" npx tsx bench/load-route.ts query
// Routes: read-rest, read-connect, query, parents, children, stats, healthz, schemas, openapi, s3-config.
import autocannon from "autocannon";
import { withDatabase } from "./support/database.js";
import { processCpuMs, startServer } from "./support/server.js";
import { loadTheData } from "./load.bench.js";

const route = process.argv[2] ?? "read-rest";
const seconds = Number(process.argv[3] ?? 8);
await withDatabase(async (db) => {
  const { ids, leaf, parentOf, query } = await loadTheData(db.url);
  const server = await startServer({ databaseUrl: db.url });
  const u = server.url;
  const reqs: Record<string, [string, unknown?]> = {
    "read-rest": ["/resources/read", { identifiers: ids }],
    "read-connect": ["/resourcestore.v1.ResourceService/Read", { identifiers: ids }],
    query: ["/query", query],
    parents: [`/parents/${leaf}`],
    children: [`/children?parent_identifier=${parentOf}`],
    stats: ["/datasources/stats"],
    healthz: ["/healthz"],
    schemas: ["/schemas"],
    openapi: ["/openapi.json"],
    "s3-config": ["/s3/config"],
  };
  const [path, body] = reqs[route]!;
  const opts = { url: u + path, connections: 50, duration: seconds, method: body ? ("POST" as const) : ("GET" as const), headers: body ? { "content-type": "application/json" } : {}, ...(body ? { body: JSON.stringify(body) } : {}) };
  await autocannon({ ...opts, duration: 2 });
  const c0 = await processCpuMs(server.pid);
  const r = await autocannon(opts);
  const c1 = await processCpuMs(server.pid);
  console.log(`${route}: ${r.requests.average} req/s p99 ${r.latency.p99} non2xx ${r.non2xx} cpu/call ${((c1 - c0) / r.requests.total).toFixed(3)} ms`);
  await server.close();
});
