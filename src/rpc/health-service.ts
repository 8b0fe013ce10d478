// grpc.health.v1.Health: SERVING while the database answers. The overall
// health ("") and every service this server exposes can be asked for.
import type { ServiceImpl } from "@connectrpc/connect";
import { type Health, HealthCheckResponse_ServingStatus as Status } from "../../gen/grpc/health/v1/health_pb.js";
import { notFound } from "../errors.js";

export interface HealthDeps {
  /** Whether the service can serve (database reachable). */
  readonly ready: () => Promise<boolean>;
  /** Fully qualified names of the services that can be asked for. */
  readonly services: readonly string[];
  /** How often Watch re-checks. */
  readonly watchIntervalMs?: number;
}

export function createHealthService(deps: HealthDeps): ServiceImpl<typeof Health> {
  const known = new Set(["", ...deps.services]);
  const status = async (): Promise<Status> => ((await deps.ready()) ? Status.SERVING : Status.NOT_SERVING);
  const interval = deps.watchIntervalMs ?? 5000;
  // Watch: one database probe per interval, shared by every watcher (a thousand
  // watchers must not make a thousand probes).
  let shared: { readonly at: number; readonly status: Promise<Status> } | undefined;
  const watchedStatus = (): Promise<Status> => {
    const now = Date.now();
    if (shared === undefined || now - shared.at >= interval) {
      const probe = status().catch(() => Status.NOT_SERVING);
      shared = { at: now, status: probe };
    }
    return shared.status;
  };
  return {
    async check(req) {
      if (!known.has(req.service)) throw notFound(`unknown service ${req.service}`);
      return { status: await status() };
    },
    async list() {
      const s = await status();
      return { statuses: Object.fromEntries([...known].map((name) => [name, { status: s }])) };
    },
    async *watch(req, ctx) {
      if (!known.has(req.service)) {
        yield { status: Status.SERVICE_UNKNOWN };
        return;
      }
      let last: Status | undefined;
      while (!ctx.signal.aborted) {
        const s = await watchedStatus();
        if (s !== last) {
          last = s;
          yield { status: s };
        }
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, interval);
          ctx.signal.addEventListener(
            "abort",
            () => {
              clearTimeout(t);
              resolve();
            },
            { once: true },
          );
        });
      }
    },
  };
}
