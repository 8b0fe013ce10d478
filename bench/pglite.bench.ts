// The embedded default (PGlite) on the same create and query
// workloads, against PostgreSQL through the same service. Informational: the
// targets say what PGlite is expected to carry (a single-user or test
// deployment), not a bar the release must pass.
import { interleaved, serviceWriter } from "./create.bench.js";
import { withDatabase } from "./support/database.js";
import { context, fmt, median, type Result } from "./support/measure.js";
import { startServer } from "./support/server.js";
import { measurePages, postJson, PAGE_QUERY } from "./query.bench.js";
import type { BenchOptions } from "./options.js";

/** PGlite writes at a quarter of PostgreSQL's rate or better (one in-process connection, WebAssembly). */
export const PGLITE_CREATE_TARGET = 0.25;
/** A query page on PGlite within 4 times PostgreSQL's latency. */
export const PGLITE_QUERY_TARGET = 4;

export async function pgliteBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const batchSize = 1000;
  const batches = opts.quick ? 10 : 50;
  context(
    `PGlite vs PostgreSQL through the service: gRPC create of ${fmt(batches)} batches of ${fmt(batchSize)}, then the query page on those rows`,
  );
  return withDatabase(async (db) => {
    const pg = await startServer({ databaseUrl: db.url });
    const lite = await startServer({});
    try {
      const rates = await interleaved(
        {
          postgres: { write: serviceWriter("grpc", pg.url, "c", batches, batchSize), countUrl: db.url },
          pglite: { write: serviceWriter("grpc", lite.url, "c", batches, batchSize), countUrl: undefined },
        },
        batches,
        batchSize,
        2,
        opts.quick ? 2 : 5,
      );
      context(`create: PostgreSQL ${fmt(rates.postgres!)} rows/s, PGlite ${fmt(rates.pglite!)} rows/s`);
      const first = { ...PAGE_QUERY, limit: 100 };
      const times = await measurePages(
        pg.url,
        {
          postgres: async () => (await postJson(`${pg.url}/query`, first)).results.length,
          pglite: async () => (await postJson(`${lite.url}/query`, first)).results.length,
        },
        opts.quick ? 30 : 60,
      );
      context(
        `query page: PostgreSQL median ${fmt(median(times.postgres!), 2)} ms, PGlite ${fmt(median(times.pglite!), 2)} ms`,
      );
      return [
        { name: "pglite-create", ratio: rates.pglite! / rates.postgres!, op: ">=", target: PGLITE_CREATE_TARGET },
        {
          name: "pglite-query-page",
          ratio: median(times.pglite!) / median(times.postgres!),
          op: "<=",
          target: PGLITE_QUERY_TARGET,
        },
      ];
    } finally {
      await Promise.all([pg.close(), lite.close()]);
    }
  });
}
