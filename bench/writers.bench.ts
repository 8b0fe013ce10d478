// The writers' ceiling (docs/benchmarks/writers.md, "The writers' ceiling"). Batch creates from 1, 2 and 4
// concurrent clients into the lean reference (bench/support/lean.ts) taking
// their commit stamp three ways: the clock row the store holds until commit
// ("clock"), no shared stamp at all ("free": the most the engine can do,
// but as_of would not be exact), and the design of docs/benchmarks/writers.md,
// "A design that commits writers in parallel" ("horizon": a shared advisory
// lock, the xid, a stamp from a sequence; no writer waits for another). The service (gRPC) writes
// the same batches at the same concurrency, against the lean reference with
// its clock, which is what it does today.
//
//   bench writers-<n>: service gRPC / lean with clock, at n clients     (what create-grpc-vs-limit is at n)
//   bench writers-<n>-clock: lean with clock / lean free                 (what the clock row costs)
//   bench writers-<n>-horizon: lean horizon / lean free                  (what the design would cost)
// All writers of one n are interleaved round by round, each in a database of its own.
import { interleaved, serviceWriter, CREATE_GRPC_TARGET } from "./create.bench.js";
import { withDatabase } from "./support/database.js";
import { context, fmt, type Result } from "./support/measure.js";
import { leanWriter, LEAN_COUNT, type StampMode } from "./support/lean.js";
import { startServer } from "./support/server.js";
import type { BenchOptions } from "./options.js";

/** The clock row may cost writers at most a tenth of what they could do (my choice; informational). */
export const CLOCK_TARGET = 0.9;
/** The same for the horizon design's stamp. */
export const HORIZON_TARGET = 0.9;

const MODES: readonly StampMode[] = ["clock", "free", "horizon"];

async function atConcurrency(
  n: number,
  batches: number,
  batchSize: number,
  rounds: number,
  warmUp: number,
): Promise<Result[]> {
  const written = batches + warmUp;
  return withDatabase((clockDb) =>
    withDatabase((freeDb) =>
      withDatabase((horizonDb) =>
        withDatabase(async (grpcDb) => {
          const urls: Record<StampMode, string> = { clock: clockDb.url, free: freeDb.url, horizon: horizonDb.url };
          const lean = await Promise.all(
            MODES.map((m) => leanWriter(urls[m], `w${m}`, written, batchSize, n, { stamp: m })),
          );
          const server = await startServer({ databaseUrl: grpcDb.url });
          try {
            const writers: Parameters<typeof interleaved>[0] = {};
            for (const [k, m] of MODES.entries())
              writers[m] = { write: lean[k]!.write, countUrl: urls[m], countSql: LEAN_COUNT };
            writers.grpc = { write: serviceWriter("grpc", server.url, "wg", written, batchSize), countUrl: grpcDb.url };
            const rates = await interleaved(writers, batches, batchSize, n, rounds, warmUp);
            context(
              `${n} client${n === 1 ? "" : "s"}: lean with clock ${fmt(rates.clock!)} rows/s, free ${fmt(rates.free!)}, ` +
                `horizon ${fmt(rates.horizon!)}, service gRPC ${fmt(rates.grpc!)}`,
            );
            return [
              { name: `writers-${n}`, ratio: rates.grpc! / rates.clock!, op: ">=", target: CREATE_GRPC_TARGET },
              { name: `writers-${n}-clock`, ratio: rates.clock! / rates.free!, op: ">=", target: CLOCK_TARGET },
              { name: `writers-${n}-horizon`, ratio: rates.horizon! / rates.free!, op: ">=", target: HORIZON_TARGET },
            ];
          } finally {
            await Promise.all([server.close(), ...lean.map((l) => l.close())]);
          }
        }),
      ),
    ),
  );
}

export async function writersBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const batchSize = 1000;
  const batches = opts.quick ? 16 : 80;
  const rounds = opts.quick ? 4 : 8;
  const warmUp = 4;
  context(
    `writers' ceiling: ${fmt(batches)} batches of ${fmt(batchSize)} a writer at 1, 2 and 4 clients; lean reference with its clock row, ` +
      `without it (free), with the horizon design's stamp, and the service over gRPC, interleaved in ${rounds} rounds after ${warmUp} batches not timed`,
  );
  const out: Result[] = [];
  for (const n of [1, 2, 4]) out.push(...(await atConcurrency(n, batches, batchSize, rounds, warmUp)));
  return out;
}
