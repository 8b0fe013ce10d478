// One route of the load benchmark on its own, for profiling: the same data
// and requests as bench/load.bench.ts, autocannon at 50 connections, and the
// server's own CPU time per call (utime+stime from /proc over the drive).
//   npx tsx bench/load-route.ts read-connect 8
//   BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" npx tsx bench/load-route.ts query
// Routes: the names of load.bench.ts's lines (read-rest, read-connect, query, parents, children, stats, healthz, schemas, openapi, s3-config).
import autocannon from "autocannon";
import { withDatabase } from "./support/database.js";
import { processCpuMs, startServer } from "./support/server.js";
import { loadOptions, loadRequests, loadTheData, WARM_UP_SECONDS } from "./load.bench.js";

const route = process.argv[2] ?? "read-rest";
const seconds = Number(process.argv[3] ?? 8);
await withDatabase(async (db) => {
  const requests = loadRequests(await loadTheData(db.url));
  const req = requests[route];
  if (req === undefined) throw new Error(`unknown route ${route} (one of ${Object.keys(requests).join(", ")})`);
  const server = await startServer({ databaseUrl: db.url });
  try {
    const opts = loadOptions(server.url, req);
    await autocannon({ ...opts, duration: WARM_UP_SECONDS });
    const c0 = await processCpuMs(server.pid);
    const r = await autocannon({ ...opts, duration: seconds });
    const c1 = await processCpuMs(server.pid);
    console.log(`${route}: ${r.requests.average} req/s p99 ${r.latency.p99} non2xx ${r.non2xx} cpu/call ${((c1 - c0) / r.requests.total).toFixed(3)} ms`);
  } finally {
    await server.close();
  }
});
