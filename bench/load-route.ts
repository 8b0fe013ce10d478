// One route of the load benchmark on its own, for profiling: the same data
// and requests as bench/load.bench.ts, autocannon at 50 connections, and the
// server's own CPU time per call (utime+stime from /proc over the drive).
//   npx tsx bench/load-route.ts read-connect 8
//   npx tsx bench/load-route.ts query 8 floor          # the route's floor server instead (bench/support/floor-server.mjs)
//   npx tsx bench/load-route.ts query 8 both 3         # service, then floor, in turns, 3 rounds each
//   BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" npx tsx bench/load-route.ts query
// Routes: the names of load.bench.ts's lines (read-rest, read-connect, query, parents, children, stats, healthz, schemas, openapi, s3-config).
import autocannon from "autocannon";
import { withDatabase } from "./support/database.js";
import { processCpuMs, startServer, type BenchServer } from "./support/server.js";
import { loadOptions, loadRequests, loadTheData, routeStatements, startFloor, WARM_UP_SECONDS } from "./load.bench.js";

const route = process.argv[2] ?? "read-rest";
const seconds = Number(process.argv[3] ?? 8);
const which = process.argv[4] ?? "service";
const rounds = Number(process.argv[5] ?? 1);
if (!["service", "floor", "both"].includes(which)) throw new Error(`the third argument is service, floor or both, not ${which}`);
await withDatabase(async (db) => {
  const data = await loadTheData(db.url);
  const requests = loadRequests(data);
  const req = requests[route];
  if (req === undefined) throw new Error(`unknown route ${route} (one of ${Object.keys(requests).join(", ")})`);
  const servers: { name: string; server: BenchServer }[] = [];
  try {
    if (which !== "floor") servers.push({ name: "service", server: await startServer({ databaseUrl: db.url }) });
    if (which !== "service") {
      const statements = (await routeStatements(data))[route];
      if (statements === undefined) throw new Error(`${route} has no statements, so no floor`);
      servers.push({ name: "floor", server: await startFloor(db.url, statements) });
    }
    for (const { server } of servers) await autocannon({ ...loadOptions(server.url, req), duration: WARM_UP_SECONDS });
    for (let round = 0; round < rounds; round++) {
      for (const { name, server } of servers) {
        const c0 = await processCpuMs(server.pid);
        const r = await autocannon({ ...loadOptions(server.url, req), duration: seconds });
        const c1 = await processCpuMs(server.pid);
        console.log(`${route} ${name}: ${r.requests.average} req/s p99 ${r.latency.p99} non2xx ${r.non2xx} cpu/call ${((c1 - c0) / r.requests.total).toFixed(3)} ms`);
      }
    }
  } finally {
    for (const { server } of servers) await server.close();
  }
});
