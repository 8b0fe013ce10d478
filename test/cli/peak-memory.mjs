// Loaded into a child `resource-store` process by `node --import` (see
// dump-memory.test.ts): samples the process's own memory every few
// milliseconds and, at exit, writes the peaks as JSON to the file named by
// RS_PEAK_MEMORY_FILE. Heap used + external (Buffers, ArrayBuffers) is what
// a program holding its data would grow; RSS is reported beside it.
import { writeFileSync } from "node:fs";

const file = process.env.RS_PEAK_MEMORY_FILE;
if (file) {
  const peak = { heapExternal: 0, heapUsed: 0, external: 0, rss: 0, samples: 0 };
  const sample = () => {
    const m = process.memoryUsage();
    peak.heapExternal = Math.max(peak.heapExternal, m.heapUsed + m.external);
    peak.heapUsed = Math.max(peak.heapUsed, m.heapUsed);
    peak.external = Math.max(peak.external, m.external);
    peak.rss = Math.max(peak.rss, m.rss);
    peak.samples++;
  };
  setInterval(sample, 5).unref();
  process.on("exit", () => {
    sample();
    writeFileSync(file, JSON.stringify({ ...peak, maxRss: process.resourceUsage().maxRSS * 1024 }));
  });
}
