// The floor of the load benchmark (docs/benchmarks/load.md, "Load against prepared floors"): the leanest Node service that
// does a route's database work. node:http and a pg pool of the service's
// size and session options; per request it reads (and parses) a JSON body,
// runs the route's captured statements on one pooled connection, every one
// of them a named prepared statement (pg's `name`: parsed once per
// connection, then only bound and executed, as pgbench -M prepared runs
// them), and answers every row as JSON. No validation, messages,
// logging, metrics or cursors: what is left of the service's cost per call,
// against this, is the cost of its own layers.
// Input: FLOOR_STATEMENTS (JSON: [{sql, params, name?}]; a statement without
// a name is sent as `floor_<its index>`), DATABASE_URL, DATABASE_POOL_SIZE,
// PG_OPTIONS. Prints {"msg":"listening","port":N}.
import http from "node:http";
import pg from "pg";

const statements = JSON.parse(process.env.FLOOR_STATEMENTS).map((st, i) => ({
  text: st.sql,
  ...(st.params ? { values: st.params } : {}),
  name: st.name ?? `floor_${i}`,
}));
const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL,
  max: Number(process.env.DATABASE_POOL_SIZE || 10),
  options: process.env.PG_OPTIONS,
});
pool.on("error", () => {});

async function run() {
  const client = await pool.connect();
  try {
    const rows = [];
    for (const st of statements) {
      const res = await client.query(st);
      if (res.rows) rows.push(...res.rows);
    }
    return rows;
  } finally {
    client.release();
  }
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    if (chunks.length > 0) JSON.parse(Buffer.concat(chunks).toString("utf8"));
    run().then(
      (rows) => {
        const body = JSON.stringify(rows);
        res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
        res.end(body);
      },
      (err) => {
        res.writeHead(500, { "content-type": "text/plain" });
        res.end(String(err));
      },
    );
  });
});
server.listen(0, "127.0.0.1", () =>
  process.stdout.write(`${JSON.stringify({ msg: "listening", port: server.address().port })}\n`),
);
const stop = () => server.close(() => void pool.end().then(() => process.exit(0)));
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
