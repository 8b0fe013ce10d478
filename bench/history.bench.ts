// A page of 100 versions of one resource through History (the
// service, gRPC) against the leanest statement PostgreSQL can answer the same
// page with, through pg (target >= 0.5, as the batch read's: a page is
// dominated by the database, not by encoding).
//
// The baseline is written here, not captured from the store: the versions of
// one identifier from resource_history in version order, each one's kind
// from the version before it by a window (lag), the plain columns as the
// tables hold them, as a named (prepared) statement, since the service
// prepares its own. It answers the same first page (no cursor, no range, a
// caller who sees everything). The store's own statement, replayed through
// pg, is timed beside it as context: it says how much of the gap is the
// statement and how much the service around it.
//
// The floor (bench/support/history-floor-server.mjs), measured in the same
// run through the same client library over gRPC: the leanest Node service
// that answers the same History call (node:http2, the lean statement
// prepared through pg, the same HistoryResponse by the service's planned
// encoder). The floor against the statement says what a unary gRPC call of
// this stack costs around the page (below the target, the target is beyond
// this stack, not the service); the service against the floor what the
// service's own layers cost (target 0.8, as the load routes' floors).
import { ALL_GRANTS } from "../src/access/index.js";
import { equals } from "@bufbuild/protobuf";
import { HistoryResponseSchema } from "../gen/resourcestore/type/v1/resource_pb.js";
import { createResourceStoreClient } from "../src/client/index.js";
import { readHistory, SESSION_OPTIONS } from "../src/store/index.js";
import { FLOOR_TARGET } from "./load.bench.js";
import { captureStatements } from "./support/capture.js";
import { connect, withDatabase } from "./support/database.js";
import { context, fmt, interleaved, summarise, type Result, type Variant } from "./support/measure.js";
import { migrateDatabase } from "./support/load.js";
import { processCpuMs, startServer } from "./support/server.js";
import type { BenchOptions } from "./options.js";

export const HISTORY_PAGE_TARGET = 0.5;
const PAGE = 100;

/** The lean page: $1 the identifier, $2 the page's size. */
export const LEAN_HISTORY_SQL = `SELECT identifier, version, tx_from AS at, actor,
       CASE WHEN lag(is_deleted) OVER w IS NULL THEN 'created'
            WHEN is_deleted THEN 'deleted'
            WHEN lag(is_deleted) OVER w THEN CASE WHEN created_at = tx_from THEN 'created' ELSE 'restored' END
            ELSE 'updated' END AS kind,
       payload_type, parent_identifier, license, access_level, derived_from, payload, created_at, updated_at
  FROM resource_history WHERE identifier = $1
WINDOW w AS (ORDER BY version) ORDER BY version LIMIT $2`;

export async function historyBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const resources = opts.quick ? 20 : 100;
  const calls = opts.quick ? 100 : 400;
  context(
    `history page: ${fmt(resources)} resources with ${PAGE} versions each (a create, then ${PAGE - 1} license changes); a page of ${PAGE}, ${calls} calls a variant`,
  );
  return withDatabase(async (db) => {
    await migrateDatabase(db.url);
    const server = await startServer({ databaseUrl: db.url });
    const floor = await startServer({
      databaseUrl: db.url,
      entry: "bench/support/history-floor-server.mjs",
      env: { HISTORY_SQL: LEAN_HISTORY_SQL, PG_OPTIONS: SESSION_OPTIONS },
    }).catch(async (err: unknown) => {
      await server.close();
      throw err;
    });
    const pgClient = await connect(db.url);
    try {
      const client = createResourceStoreClient({ baseUrl: server.url, transport: "grpc" });
      const ids = Array.from({ length: resources }, (_, i) => `h-${String(i).padStart(5, "0")}`);
      await client.resources.create({
        resources: ids.map((identifier) => ({
          identifier,
          payload: { case: "study", value: { modality: "CT", description: "a study" } },
        })),
      });
      // The versions through the service, so the history (actors included) is the service's own.
      for (let v = 1; v < PAGE; v++) {
        await client.resources.update({ updates: Object.fromEntries(ids.map((id) => [id, { license: `L-${v}` }])) });
      }
      await pgClient.query("ANALYZE");
      // The store's statement for a first page, captured from its own code (context only).
      const store = (
        await captureStatements(
          (d) =>
            readHistory(d, () => Promise.reject(new Error("no cursor on a first page")), ids[0]!, ALL_GRANTS, {
              limit: PAGE,
            }),
          (sql) => (/LEFT JOIN LATERAL/.test(sql) ? [{ at: null, kind: null, actor: null }] : undefined),
        )
      )[0]!;
      const id = (i: number) => ids[i % resources]!;
      // The floor is a floor of this call only if it answers what the service answers.
      const floorClient = createResourceStoreClient({ baseUrl: floor.url, transport: "grpc" });
      const [fromService, fromFloor] = [
        await client.resources.history({ identifier: id(0), limit: PAGE }),
        await floorClient.resources.history({ identifier: id(0), limit: PAGE }),
      ];
      if (fromService.versions.length !== PAGE || !equals(HistoryResponseSchema, fromService, fromFloor)) {
        throw new Error(
          `the floor's History answer differs from the service's (${fromFloor.versions.length} and ${fromService.versions.length} versions): no figures`,
        );
      }
      const variants: Variant[] = [
        {
          name: "pg lean",
          run: async (i) =>
            (await pgClient.query({ name: "lean", text: LEAN_HISTORY_SQL, values: [id(i), PAGE] })).rows.length,
        },
        {
          name: "pg store's statement",
          // It asks for limit + 1 rows (to know whether a page follows); a resource has exactly PAGE versions.
          run: async (i) =>
            (await pgClient.query({ name: "store", text: store.sql, values: [id(i), ...store.params!.slice(1)] })).rows
              .length,
        },
        {
          name: "service",
          run: async (i) => (await client.resources.history({ identifier: id(i), limit: PAGE })).versions.length,
        },
        {
          name: "floor",
          run: async (i) => (await floorClient.resources.history({ identifier: id(i), limit: PAGE })).versions.length,
        },
      ];
      const cpu0 = [await processCpuMs(server.pid), await processCpuMs(floor.pid)];
      const med = summarise(await interleaved(variants, calls, PAGE, "versions"));
      const perCall = async (pid: number, before: number) =>
        fmt(((await processCpuMs(pid)) - before) / (calls + Math.ceil(calls / 10)), 2);
      context(
        `CPU a call (/proc, warm-up included): service ${await perCall(server.pid, cpu0[0]!)} ms, floor ${await perCall(floor.pid, cpu0[1]!)} ms`,
      );
      context(
        `the store's statement over the lean one, both through pg: ${fmt(med("pg store's statement") / med("pg lean"), 2)}`,
      );
      return [
        { name: "history-page", ratio: med("pg lean") / med("service"), op: ">=", target: HISTORY_PAGE_TARGET },
        {
          name: "history-page-floor",
          ratio: med("pg lean") / med("floor"),
          op: ">=",
          target: HISTORY_PAGE_TARGET,
          note: "the floor (node:http2 + the lean statement prepared + the planned encoder) against the statement: below the page's target, the target is beyond this stack's unary gRPC call",
        },
        {
          name: "history-page-vs-floor",
          ratio: med("floor") / med("service"),
          op: ">=",
          target: FLOOR_TARGET,
          note: "the service against its floor, same client, same run",
        },
      ];
    } finally {
      await pgClient.end();
      await floor.close();
      await server.close();
    }
  });
}
