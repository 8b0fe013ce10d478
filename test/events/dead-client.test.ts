// A client that dies (SIGKILL: no cancel, no RST_STREAM from it, only the
// kernel closing its socket) ends its change-feed streams on every surface
// and both revisions: the open-stream count is back within 2 s, and a commit
// afterwards reads no history for it (docs/events.md; a killed gRPC `watch` held
// its streams, and every slot of MAX_WATCH_STREAMS, until a restart).
import { spawn } from "node:child_process";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createResourceStore } from "../../src/store/index.js";
import { LOCAL_CALLER } from "../../src/access/index.js";
import { startTestServer, type TestServer } from "../support/app.js";

const root = join(import.meta.dirname, "../..");

interface FeedNumbers {
  open: number;
  reads: number;
}

async function feedNumbers(url: string): Promise<FeedNumbers> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const n = (re: RegExp) => Number(re.exec(text)?.[1] ?? Number.NaN);
  return {
    open: n(/^rs_events_streams_open (\d+)$/m),
    reads:
      n(/^rs_events_history_reads_total\{by="tail"\} (\d+)$/m) +
      n(/^rs_events_history_reads_total\{by="stream"\} (\d+)$/m),
  };
}

/** Polls until `ok` holds or `ms` pass; returns the last numbers either way. */
async function until(url: string, ok: (n: FeedNumbers) => boolean, ms: number): Promise<FeedNumbers> {
  const end = Date.now() + ms;
  for (;;) {
    const n = await feedNumbers(url);
    if (ok(n) || Date.now() > end) return n;
    await new Promise((r) => setTimeout(r, 50));
  }
}

const SURFACES = ["grpc", "grpc-deadline", "grpc-web", "connect", "connect-json-h2", "sse", "sse-h2"];

describe("a change-feed client killed mid-stream", () => {
  let server: TestServer;
  let n = 0;
  beforeAll(async () => {
    // Heartbeats far apart: a stream must close because its client went, not because a heartbeat failed to write.
    // Two slots: a leaked stream from one surface fails the next surface's start.
    server = await startTestServer({ EVENTS_HEARTBEAT_MS: "600000", MAX_WATCH_STREAMS: "2" });
  });
  afterAll(async () => {
    await server?.close();
  });

  it.each(SURFACES)("%s: its streams close within 2 s and no history is read for them", async (surface) => {
    const child = spawn(process.execPath, ["--import", "tsx", "test/events/watch-client.ts", surface, server.url], {
      cwd: root,
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise((r) => child.once("exit", r));
    try {
      // Both revisions' streams open, and each has sent its first message.
      const opened = await until(server.url, (x) => x.open === 2, 30_000);
      expect(opened.open, stderr).toBe(2);
      // A commit reaches both streams (the tail reads it for them).
      const store = createResourceStore(server.app.db);
      await store.create(LOCAL_CALLER, [
        { identifier: `dead-${surface}-${n++}`, payloadType: "datasource", payload: { name: "before" } },
      ]);
      await until(server.url, (x) => x.reads > opened.reads, 5_000);
      child.kill("SIGKILL");
      await exited;
      const closed = await until(server.url, (x) => x.open === 0, 2_000);
      expect(closed.open).toBe(0);
      // Nobody is watching: a commit now reads no history at all.
      await store.create(LOCAL_CALLER, [
        { identifier: `dead-${surface}-${n++}`, payloadType: "datasource", payload: { name: "after" } },
      ]);
      await new Promise((r) => setTimeout(r, 500));
      expect((await feedNumbers(server.url)).reads).toBe(closed.reads);
    } finally {
      child.kill("SIGKILL");
    }
  });
});
