// Batch reads of 100 identifiers through the service against
// the same statement through pg, and `as_of` reads against current reads
// (target: an as_of read costs at most 1.5 times a current one).
import { readResources } from "../src/store/index.js";
import { createResourceStoreClient } from "../src/client/index.js";
import { captureStatements, type Statement } from "./support/capture.js";
import { connect, withDatabase } from "./support/database.js";
import { context, fmt, interleaved, summarise, type Result, type Variant } from "./support/measure.js";
import { clockNow, loadThroughStoreSql, migrateDatabase } from "./support/load.js";
import { startServer } from "./support/server.js";
import { resourceAt } from "./support/workload.js";
import type { BenchOptions } from "./options.js";
import { ALL_GRANTS } from "../src/access/index.js";

export const AS_OF_TARGET = 1.2;
/** Contract silent; chosen so a read is dominated by the database, not by encoding. */
export const READ_TARGET = 0.5;

/** A small deterministic generator, so every run reads the same identifiers. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

export async function readBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const batchSize = 1000;
  const batches = opts.quick ? 20 : 100;
  const total = batches * batchSize;
  const calls = opts.quick ? 100 : 400;
  const perRead = 100;
  context(
    `batch read: ${fmt(total)} resources with 2 versions each (create, then a license change); ${fmt(perRead)} random identifiers a read, ${calls} reads a variant`,
  );
  return withDatabase(async (db) => {
    await migrateDatabase(db.url);
    await loadThroughStoreSql(db.url, "r", batches, batchSize);
    const afterCreate = await clockNow(db.url);
    const server = await startServer({ databaseUrl: db.url });
    const pgClient = await connect(db.url);
    try {
      const client = createResourceStoreClient({ baseUrl: server.url, transport: "grpc" });
      // Second versions through the service, so the history is the service's own.
      for (let b = 0; b < batches; b++) {
        const updates: Record<string, { license: string }> = {};
        for (let k = 0; k < batchSize; k++)
          updates[resourceAt("r", b * batchSize + k, batchSize).identifier] = { license: "CC0-1.0" };
        await client.resources.update({ updates });
      }
      // Statistics as autovacuum would have them a minute later. Without them
      // the as_of plan is costed high enough to be JIT-compiled (~0.8 s a
      // read): see docs/benchmarks/first-runs.md, "What limits each miss".
      await pgClient.query("ANALYZE");
      const rnd = random(9);
      const idSets = Array.from({ length: calls * 2 }, () => {
        const ids = new Set<string>();
        while (ids.size < perRead) ids.add(resourceAt("r", Math.floor(rnd() * total), batchSize).identifier);
        return [...ids];
      });
      // The statement the store sends for each read, captured from its own code.
      const sqlOf = async (ids: string[], asOf?: string): Promise<Statement[]> =>
        captureStatements((d) => readResources(d, ALL_GRANTS, ids, asOf !== undefined ? { asOf } : {}));
      // An as_of read is two statements: the read point, then the read at it (src/store/read.ts).
      const runRead = async (sts: readonly Statement[]): Promise<number> => {
        let point: unknown;
        let n = 0;
        for (const [k, st] of sts.entries()) {
          const params = k > 0 && point !== undefined ? [st.params![0], point] : st.params;
          const { rows } = await pgClient.query<{ t?: string }>(st.sql, params);
          if (k === 0 && sts.length > 1) point = rows[0]?.t;
          n = rows.length;
        }
        return n;
      };
      const currentSql = await Promise.all(idSets.map((ids) => sqlOf(ids)));
      const asOfSql = await Promise.all(idSets.map((ids) => sqlOf(ids, afterCreate)));

      const variants: Variant[] = [
        { name: "pg current", run: (i) => runRead(currentSql[i]!) },
        { name: "pg as_of", run: (i) => runRead(asOfSql[i]!) },
        {
          name: "service current",
          run: async (i) => (await client.resources.read({ identifiers: idSets[i]! })).resources.length,
        },
        {
          name: "service as_of",
          run: async (i) =>
            (await client.resources.read({ identifiers: idSets[i]!, asOf: afterCreate })).resources.length,
        },
      ];
      const med = summarise(await interleaved(variants, calls, perRead, "resources"));
      context(`as_of over current straight through pg: ${fmt(med("pg as_of") / med("pg current"), 2)}`);
      return [
        { name: "read-100", ratio: med("pg current") / med("service current"), op: ">=", target: READ_TARGET },
        { name: "read-as-of", ratio: med("service as_of") / med("service current"), op: "<=", target: AS_OF_TARGET },
      ];
    } finally {
      await pgClient.end();
      await server.close();
    }
  });
}
