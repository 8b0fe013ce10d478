// The gRPC health Watch shares one database probe among all its watchers.
import type { HandlerContext } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { HealthCheckResponse_ServingStatus as Status } from "../../gen/grpc/health/v1/health_pb.js";
import { createHealthService } from "../../src/rpc/index.js";

it("many watchers cost one probe", async () => {
  let probes = 0;
  const health = createHealthService({
    ready: async () => {
      probes++;
      await new Promise((r) => setTimeout(r, 20));
      return true;
    },
    services: [],
    watchIntervalMs: 60_000,
  });
  const abort = new AbortController();
  const ctx = { signal: abort.signal } as unknown as HandlerContext;
  const watchers = Array.from(
    { length: 50 },
    () => health.watch({ service: "" } as never, ctx) as AsyncGenerator<{ status: Status }>,
  );
  const first = await Promise.all(watchers.map((w) => w.next()));
  for (const f of first) expect(f.value?.status).toBe(Status.SERVING);
  expect(probes).toBe(1);
  abort.abort();
  await Promise.all(watchers.map((w) => w.return(undefined)));
});
