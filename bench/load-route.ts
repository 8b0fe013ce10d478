// One route of the load benchmark on its own, for profiling: the same data
// and requests as bench/load.bench.ts, autocannon at 50 connections, and the
// server's own CPU time per call (utime+stime from /proc over the drive).
//   npx tsx bench/load-route.ts read-connect 8
//   npx tsx bench/load-route.ts query 8 floor          # the route's floor server instead (bench/support/floor-server.mjs)
//   npx tsx bench/load-route.ts query 8 service,floor 3  # service, then floor, in turns, 3 rounds each
//   npx tsx bench/load-route.ts query 8 service,service+DATABASE_POOL_SIZE=20,dist-old/src/main.js 3
//     # A/B: a server is `service`, `floor` or another build's main.js (from the repository's root, beside node_modules), each with +NAME=value settings if any
//     # (not LOG_LEVEL above info: the harness waits for the server's "listening" line, an info line)
//   BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" npx tsx bench/load-route.ts query
// Routes: the names of load.bench.ts's lines (read-rest, read-connect, query, parents, children, stats, healthz, schemas, openapi, s3-config).
import { randomBytes } from "node:crypto";
import autocannon from "autocannon";
import { withDatabase } from "./support/database.js";
import { processCpuMs, startServer, type BenchServer } from "./support/server.js";
import { loadOptions, loadRequests, loadTheData, routeStatements, startFloor, WARM_UP_SECONDS } from "./load.bench.js";

const route = process.argv[2] ?? "read-rest";
const seconds = Number(process.argv[3] ?? 8);
const which = (process.argv[4] ?? "service").split(",");
const rounds = Number(process.argv[5] ?? 1);
await withDatabase(async (db) => {
  const data = await loadTheData(db.url);
  const requests = loadRequests(data);
  const req = requests[route];
  if (req === undefined) throw new Error(`unknown route ${route} (one of ${Object.keys(requests).join(", ")})`);
  const servers: { name: string; server: BenchServer }[] = [];
  // Services on one database must know its registry key alike.
  const key = { REGISTRY_SECRET: randomBytes(32).toString("base64url") };
  try {
    for (const spec of which) {
      const [kind = "", ...settings] = spec.split("+");
      const env = Object.fromEntries(
        settings.map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
      );
      if (kind === "floor") {
        const statements = (await routeStatements(data))[route];
        if (statements === undefined) throw new Error(`${route} has no statements, so no floor`);
        servers.push({ name: spec, server: await startFloor(db.url, statements) });
      } else if (kind === "service" || kind.endsWith(".js")) {
        servers.push({
          name: spec,
          server: await startServer({
            databaseUrl: db.url,
            env: { ...key, ...env },
            ...(kind === "service" ? {} : { entry: kind }),
          }),
        });
      } else throw new Error(`a server is service, floor or a main.js, not ${spec}`);
    }
    for (const { server } of servers) await autocannon({ ...loadOptions(server.url, req), duration: WARM_UP_SECONDS });
    for (let round = 0; round < rounds; round++) {
      for (const { name, server } of servers) {
        const c0 = await processCpuMs(server.pid);
        const r = await autocannon({ ...loadOptions(server.url, req), duration: seconds });
        const c1 = await processCpuMs(server.pid);
        console.log(
          `${route} ${name}: ${r.requests.average} req/s p99 ${r.latency.p99} non2xx ${r.non2xx} cpu/call ${((c1 - c0) / r.requests.total).toFixed(3)} ms`,
        );
      }
    }
  } finally {
    for (const { server } of servers) await server.close();
  }
});
