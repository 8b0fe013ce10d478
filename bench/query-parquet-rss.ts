// Peak RSS of /query/parquet over 1,000,000 rows, streamed through the
// QueryService handler and discarded as it arrives. Prints the RSS before
// the export (the baseline), the peak during it, and their ratio.
// Usage: tsx bench/query-parquet-rss.ts [rows]   (DATABASE_URL = PostgreSQL, else PGlite in memory)
import { createClient, createRouterTransport } from "@connectrpc/connect";
import { QueryService } from "../gen/resourcestore/v2/query_service_pb.js";
import { createQueryService } from "../src/rpc/index.js";
import { migrate, openDatabase } from "../src/store/index.js";

const rows = Number(process.argv[2] ?? 1_000_000);
const url = process.env.DATABASE_URL;
const db = await openDatabase(url ? { databaseUrl: url } : {});
await migrate(db);
await db.query("DELETE FROM resources WHERE identifier LIKE 'bench-%'");
const clock = await db.query<{ t: string }>("SELECT now()::text AS t");
// Rows straight into the current table (what the write path would leave behind; nothing superseded yet).
await db.query(
  `INSERT INTO resources (identifier, payload_type, parent_identifier, license, access_level, derived_from, payload, created_at, updated_at, version, actor)
   SELECT 'bench-' || lpad(g::text, 8, '0'), 'file', NULL, CASE WHEN g % 3 = 0 THEN 'MIT' END, 'internal',
          ARRAY['src-' || (g % 100)], jsonb_build_object('path', 's3://b/k' || g, 'size_bytes', (g * 1000)::text,
          'content_type', 'application/dicom', 'sha256', md5(g::text) || md5(g::text)),
          $1::timestamptz + g * interval '1 microsecond', $1::timestamptz + g * interval '1 microsecond', 1, 'bench'
     FROM generate_series(1, $2::int) g`,
  [clock.rows[0]?.t, rows],
);
await db.query("UPDATE clock SET last = greatest(last, now() + interval '1 second')");
const client = createClient(
  QueryService,
  createRouterTransport((r) => r.service(QueryService, createQueryService({ db }))),
);

global.gc?.();
const baseline = process.memoryUsage().rss;
let peak = baseline;
const timer = setInterval(() => {
  peak = Math.max(peak, process.memoryUsage().rss);
}, 20);
let bytes = 0;
let chunks = 0;
const started = performance.now();
for await (const body of client.queryParquet({
  payloadType: "file",
  filters: [{ field: "identifier", op: "starts_with", value: { kind: { case: "stringValue", value: "bench-" } } }],
})) {
  bytes += body.data.length;
  chunks += 1;
}
const seconds = (performance.now() - started) / 1000;
clearInterval(timer);
peak = Math.max(peak, process.memoryUsage().rss);
const mb = (n: number) => (n / 1024 / 1024).toFixed(0);
console.log(
  `backend ${db.kind}, ${rows} rows, ${chunks} chunks, ${mb(bytes)} MiB of parquet, ${(rows / seconds).toFixed(0)} rows/s`,
);
console.log(
  `RSS before export ${mb(baseline)} MiB, peak during export ${mb(peak)} MiB (x${(peak / baseline).toFixed(2)} of baseline)`,
);
await db.query("DELETE FROM resources WHERE identifier LIKE 'bench-%'");
await db.close();
