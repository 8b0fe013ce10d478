// Bench-only harness for the cluster decision (docs/benchmarks/load.md, "The cluster decision"): the
// compiled server (dist/src/main.js) in BENCH_WORKERS node:cluster workers
// sharing one port (PORT=0 gives every worker the same port). The workers'
// stdout is this process's, so the first "listening" line names the port.
// SIGTERM/SIGINT go to every worker; the harness exits once they have.
import cluster from "node:cluster";

if (cluster.isPrimary) {
  const n = Math.max(1, Number(process.env.BENCH_WORKERS ?? 2));
  let live = 0;
  for (let i = 0; i < n; i++) {
    cluster.fork();
    live++;
  }
  cluster.on("exit", () => {
    live--;
    if (live === 0) process.exit(0);
  });
  const stop = (signal) => {
    for (const w of Object.values(cluster.workers ?? {})) w?.process.kill(signal);
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
} else {
  await import("../../dist/src/main.js");
}
