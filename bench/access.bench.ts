// The cost of access control (docs/benchmarks/access.md, "Access"). The same work through the
// service with a restricted token as a ratio to an unrestricted one (target
// >= 0.9: a restricted caller pays at most ~10%). The restricted token lists
// every datasource of the data explicitly at clearance `internal`, so both
// tokens see exactly the same rows and only the predicate differs:
//   access-read    100-identifier reads (children included)
//   access-query   first pages of 100 files
//   access-export  a parquet export of every file
import { createResourceStoreClient } from "../src/client/index.js";
import { connect, withDatabase } from "./support/database.js";
import { context, fmt, latencies, median, timed, type Result } from "./support/measure.js";
import { loadThroughStoreSql, migrateDatabase } from "./support/load.js";
import { startServer } from "./support/server.js";
import { resourceAt } from "./support/workload.js";
import type { BenchOptions } from "./options.js";

export const ACCESS_TARGET = 0.9;
const DATASOURCES = ["bench-ds0", "bench-ds1", "bench-ds2", "bench-ds3"];

export async function accessBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const batchSize = 1000;
  const batches = opts.quick ? 20 : 100;
  const total = batches * batchSize;
  const calls = opts.quick ? 100 : 400;
  context(
    `access: ${fmt(total)} resources over ${DATASOURCES.length} datasources; unrestricted token vs one listing every datasource at clearance internal`,
  );
  return withDatabase(async (db) => {
    await migrateDatabase(db.url);
    await loadThroughStoreSql(db.url, "a", batches, batchSize);
    const pg = await connect(db.url);
    // Attribution as the writes would keep it had the series hung under patients of four datasources.
    await pg.query(
      `UPDATE resources SET datasource_id = ($1::text[])[1 + abs(hashtext(coalesce(parent_identifier, identifier))) % $2]`,
      [DATASOURCES, DATASOURCES.length],
    );
    await pg.query(
      `INSERT INTO resource_attribution (identifier, datasource_id, tx_from, tx_to)
       SELECT identifier, datasource_id, created_at, 'infinity' FROM resources WHERE datasource_id IS NOT NULL`,
    );
    await pg.query("ANALYZE");
    await pg.end();
    const restricted = `read,${DATASOURCES.map((d) => `datasource:${d}`).join(",")},clearance:internal`;
    const server = await startServer({ databaseUrl: db.url, env: { API_TOKENS: `full=read;limited=${restricted}` } });
    try {
      const full = createResourceStoreClient({ baseUrl: server.url, transport: "grpc", token: "full" });
      const limited = createResourceStoreClient({ baseUrl: server.url, transport: "grpc", token: "limited" });
      let seed = 7;
      const rnd = () => ((seed = (seed * 1664525 + 1013904223) >>> 0), seed / 2 ** 32);
      const idSets = Array.from({ length: calls + Math.ceil(calls / 10) }, () => {
        const ids = new Set<string>();
        while (ids.size < 100) ids.add(resourceAt("a", Math.floor(rnd() * total), batchSize).identifier);
        return [...ids];
      });
      type Client = typeof full;
      const read = (c: Client) => (i: number) => c.resources.read({ identifiers: idSets[i % idSets.length]! });
      const query = (c: Client) => () => c.query.query({ payloadType: "file", limit: 100 });
      const exportAll = async (c: Client) => {
        let bytes = 0;
        for await (const chunk of c.query.queryParquet({ payloadType: "file" })) bytes += chunk.data.length;
        return bytes;
      };
      const ratioOf = (a: number, b: number) => a / b;
      const results: Result[] = [];
      // Read and query alternate the two tokens round by round (ten rounds), so drift in the machine's load hits both.
      const interleaved = async (
        a: (i: number) => Promise<unknown>,
        b: (i: number) => Promise<unknown>,
      ): Promise<[number, number]> => {
        const rounds = 10;
        const per = Math.ceil(calls / rounds);
        const la: number[] = [];
        const lb: number[] = [];
        for (let r = 0; r < rounds; r++) {
          // Both tokens do the same calls in a round (the same identifiers for reads).
          const shift = (fn: (i: number) => Promise<unknown>) => (i: number) => fn(r * per + i);
          la.push(...(await latencies(shift(a), per, r === 0 ? undefined : 1)));
          lb.push(...(await latencies(shift(b), per, r === 0 ? undefined : 1)));
        }
        return [median(la), median(lb)];
      };
      const [readFull, readLimited] = await interleaved(read(full), read(limited));
      results.push({
        name: "access-read",
        ratio: ratioOf(readFull, readLimited),
        op: ">=",
        target: ACCESS_TARGET,
        note: `median ${readFull.toFixed(2)} ms unrestricted, ${readLimited.toFixed(2)} ms restricted`,
      });
      const [queryFull, queryLimited] = await interleaved(query(full), query(limited));
      results.push({
        name: "access-query",
        ratio: ratioOf(queryFull, queryLimited),
        op: ">=",
        target: ACCESS_TARGET,
        note: `median ${queryFull.toFixed(2)} ms unrestricted, ${queryLimited.toFixed(2)} ms restricted`,
      });
      await exportAll(full);
      // Exports alternate the two tokens, so drift in the machine's load hits both.
      const runs = opts.quick ? 2 : 5;
      const ef: number[] = [];
      const el: number[] = [];
      for (let i = 0; i < runs; i++) {
        ef.push((await timed(() => exportAll(full))).seconds);
        el.push((await timed(() => exportAll(limited))).seconds);
      }
      results.push({
        name: "access-export",
        ratio: ratioOf(median(ef), median(el)),
        op: ">=",
        target: ACCESS_TARGET,
        note: `median ${median(ef).toFixed(2)} s unrestricted, ${median(el).toFixed(2)} s restricted`,
      });
      return results;
    } finally {
      await server.close();
    }
  });
}
