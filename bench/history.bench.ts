// Issue 32: a page of 100 versions of one resource through History (the
// service, gRPC) against the same statement through pg (target >= 0.5, as
// the batch read's: a page is dominated by the database, not by encoding).
import { ALL_GRANTS } from "../src/access/index.js";
import { createResourceStoreClient } from "../src/client/index.js";
import { readHistory } from "../src/store/index.js";
import { captureStatements } from "./support/capture.js";
import { connect, withDatabase } from "./support/database.js";
import { context, fmt, median, percentile, type Result } from "./support/measure.js";
import { migrateDatabase } from "./support/load.js";
import { startServer } from "./support/server.js";
import type { BenchOptions } from "./options.js";

export const HISTORY_PAGE_TARGET = 0.5;
const PAGE = 100;

export async function historyBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const resources = opts.quick ? 20 : 100;
  const calls = opts.quick ? 100 : 400;
  context(`history page: ${fmt(resources)} resources with ${PAGE} versions each (a create, then ${PAGE - 1} license changes); a page of ${PAGE}, ${calls} calls a variant`);
  return withDatabase(async (db) => {
    await migrateDatabase(db.url);
    const server = await startServer({ databaseUrl: db.url });
    const pgClient = await connect(db.url);
    try {
      const client = createResourceStoreClient({ baseUrl: server.url, transport: "grpc" });
      const ids = Array.from({ length: resources }, (_, i) => `h-${String(i).padStart(5, "0")}`);
      await client.resources.create({ resources: ids.map((identifier) => ({ identifier, payload: { case: "study", value: { modality: "CT", description: "a study" } } })) });
      // The versions through the service, so the history (actors included) is the service's own.
      for (let v = 1; v < PAGE; v++) {
        await client.resources.update({ updates: Object.fromEntries(ids.map((id) => [id, { license: `L-${v}` }])) });
      }
      await pgClient.query("ANALYZE");
      // The statement the store sends for a first page, captured from its own code.
      const sqlOf = async (id: string) =>
        (
          await captureStatements(
            (d) => readHistory(d, () => Promise.reject(new Error("no cursor on a first page")), id, ALL_GRANTS, { limit: PAGE }),
            (sql) => (/LEFT JOIN LATERAL/.test(sql) ? [{ at: null, kind: null, actor: null }] : undefined),
          )
        )[0]!;
      const statements = await Promise.all(ids.map(sqlOf));
      const variants: { name: string; run: (i: number) => Promise<number> }[] = [
        {
          name: "pg",
          run: async (i) => {
            const st = statements[i % resources]!;
            return (await pgClient.query(st.sql, st.params)).rows.length;
          },
        },
        { name: "service", run: async (i) => (await client.resources.history({ identifier: ids[i % resources]!, limit: PAGE })).versions.length },
      ];
      const times = new Map(variants.map((v) => [v.name, [] as number[]]));
      for (let i = 0; i < calls + calls / 10; i++) {
        for (const v of variants) {
          const start = process.hrtime.bigint();
          const n = await v.run(i);
          const ms = Number(process.hrtime.bigint() - start) / 1e6;
          if (n !== PAGE) throw new Error(`${v.name} returned ${n} versions, expected ${PAGE}`);
          if (i >= calls / 10) times.get(v.name)!.push(ms); // the first tenth warms up
        }
      }
      const med = (name: string) => median(times.get(name)!);
      for (const v of variants) context(`${v.name}: median ${fmt(med(v.name), 2)} ms, p95 ${fmt(percentile(times.get(v.name)!, 95), 2)} ms`);
      return [{ name: "history-page", ratio: med("pg") / med("service"), op: ">=", target: HISTORY_PAGE_TARGET }];
    } finally {
      await pgClient.end();
      await server.close();
    }
  });
}
