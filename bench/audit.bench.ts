// The read audit's cost (docs/benchmarks/history-and-audit.md, "Audit and history"). The same server work with
// AUDIT_LOG set (a file, as production would have it) and unset: two servers
// of the same build on the same database, their calls interleaved, so the
// ratio (unset over set) is what writing one line a call costs a read of 100
// identifiers (`audit-read`) and a query page of 100 (`audit-query`).
// Target >= 0.9: the log may cost a read a tenth of its time at most.
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { QueryRequestSchema } from "../gen/resourcestore/type/v1/query_pb.js";
import { createResourceStoreClient } from "../src/client/index.js";
import { PAGE_QUERY } from "./query.bench.js";
import { connect, withDatabase } from "./support/database.js";
import { loadThroughStoreSql, migrateDatabase } from "./support/load.js";
import { context, fmt, interleaved, summarise, type Result, type Variant } from "./support/measure.js";
import { startServer } from "./support/server.js";
import { resourceAt } from "./support/workload.js";
import type { BenchOptions } from "./options.js";

export const AUDIT_TARGET = 0.9;

/** A small deterministic generator, so every run reads the same identifiers. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

export async function auditBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const batchSize = 1000;
  const batches = opts.quick ? 20 : 100;
  const total = batches * batchSize;
  const calls = opts.quick ? 100 : 400;
  const perCall = 100;
  context(
    `audit: ${fmt(total)} resources; a read of ${perCall} random identifiers and a query page of ${perCall} (gRPC), ${calls} calls a variant, AUDIT_LOG unset against a file`,
  );
  const dir = await mkdtemp(join(tmpdir(), "rs-bench-audit-"));
  try {
    return await withDatabase(async (db) => {
      await migrateDatabase(db.url);
      await loadThroughStoreSql(db.url, "a", batches, batchSize);
      // Statistics as autovacuum would have them a minute later (see read.bench.ts).
      const pgClient = await connect(db.url);
      await pgClient.query("ANALYZE").finally(() => pgClient.end());
      // Both servers must know the one registry key the database was first opened with.
      const env = { REGISTRY_SECRET: randomBytes(32).toString("base64url") };
      const off = await startServer({ databaseUrl: db.url, env });
      const on = await startServer({ databaseUrl: db.url, env: { ...env, AUDIT_LOG: join(dir, "audit.log") } });
      try {
        const clients = {
          off: createResourceStoreClient({ baseUrl: off.url, transport: "grpc" }),
          on: createResourceStoreClient({ baseUrl: on.url, transport: "grpc" }),
        };
        const rnd = random(32);
        const idSets = Array.from({ length: calls * 2 }, () => {
          const ids = new Set<string>();
          while (ids.size < perCall) ids.add(resourceAt("a", Math.floor(rnd() * total), batchSize).identifier);
          return [...ids];
        });
        const query = fromJson(QueryRequestSchema, { ...PAGE_QUERY, limit: perCall } as unknown as JsonObject);
        const results: Result[] = [];
        for (const [line, run] of [
          [
            "read",
            (c: (typeof clients)["on"], i: number) =>
              c.resources.read({ identifiers: idSets[i]!, excludeChildren: true }).then((r) => r.resources.length),
          ],
          ["query", (c: (typeof clients)["on"]) => c.query.query(query).then((r) => r.results.length)],
        ] as const) {
          const variants: Variant[] = [
            { name: `${line}, audit unset`, run: (i) => run(clients.off, i) },
            { name: `${line}, audit to a file`, run: (i) => run(clients.on, i) },
          ];
          const med = summarise(await interleaved(variants, calls, perCall, "resources"));
          results.push({
            name: `audit-${line}`,
            ratio: med(`${line}, audit unset`) / med(`${line}, audit to a file`),
            op: ">=",
            target: AUDIT_TARGET,
          });
        }
        context(`audit log: ${fmt((await stat(join(dir, "audit.log"))).size / 1024)} KiB`);
        return results;
      } finally {
        await on.close();
        await off.close();
      }
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
