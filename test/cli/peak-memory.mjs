// Loaded into a child `resource-store` process by `node --import` (see
// dump-memory.test.ts): samples the process's own memory and, at exit,
// writes the peaks as JSON to the file named by RS_PEAK_MEMORY_FILE.
//
// Two measures:
// - live: every LIVE_MS, a full collection (the process runs with
//   --expose-gc), then heap used + external (Buffers, ArrayBuffers). That is
//   what the program holds; a program that kept its data would grow it.
// - raw: every 5 ms, heap used + external as they stand, garbage included.
//   Its peak follows V8's own pacing (external memory is only freed when a
//   collection runs, and V8 lets garbage Buffers pile up to tens of MB
//   before one), so it is reported, not bounded.
import { writeFileSync } from "node:fs";

const file = process.env.RS_PEAK_MEMORY_FILE;
const LIVE_MS = 50;
if (file) {
  const collect = globalThis.gc;
  if (typeof collect !== "function") throw new Error("peak-memory.mjs needs node --expose-gc");
  const peak = {
    heapExternal: 0,
    heapUsed: 0,
    external: 0,
    rss: 0,
    samples: 0,
    live: 0,
    liveHeap: 0,
    liveExternal: 0,
    liveSamples: 0,
  };
  const sample = () => {
    const m = process.memoryUsage();
    peak.heapExternal = Math.max(peak.heapExternal, m.heapUsed + m.external);
    peak.heapUsed = Math.max(peak.heapUsed, m.heapUsed);
    peak.external = Math.max(peak.external, m.external);
    peak.rss = Math.max(peak.rss, m.rss);
    peak.samples++;
  };
  const live = () => {
    sample();
    collect();
    const m = process.memoryUsage();
    peak.live = Math.max(peak.live, m.heapUsed + m.external);
    peak.liveHeap = Math.max(peak.liveHeap, m.heapUsed);
    peak.liveExternal = Math.max(peak.liveExternal, m.external);
    peak.liveSamples++;
  };
  setInterval(sample, 5).unref();
  setInterval(live, LIVE_MS).unref();
  process.on("exit", () => {
    live();
    writeFileSync(file, JSON.stringify({ ...peak, maxRss: process.resourceUsage().maxRSS * 1024 }));
  });
}
