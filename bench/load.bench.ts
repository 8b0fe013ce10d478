// Throughput under concurrent load (docs/benchmarks/load.md, "Throughput under load"). autocannon drives one service
// process (PostgreSQL) at 50 connections for a bounded time per route; the
// reference, measured in the same run, is pgbench with as many clients
// running the statements the route sends (captured from the store's own
// code), each prepared (docs/benchmarks/load.md, "Load against prepared floors"), or /healthz for the documents that never
// change. Each statement route also gets a `-vs-floor` line: the service
// against the leanest Node service sending the same statements, prepared,
// driven in turns with it.
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { existsSync, readdirSync } from "node:fs";
import autocannon from "autocannon";
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { QueryRequestSchema } from "../gen/resourcestore/type/v1/query_pb.js";
import {
  datasourceStats,
  listChildren,
  listParents,
  pageStatement,
  planQuery,
  readResources,
  SESSION_OPTIONS,
} from "../src/store/index.js";
import { captureStatements, type Statement } from "./support/capture.js";
import { connect, withDatabase } from "./support/database.js";
import { loadThroughStoreSql, migrateDatabase } from "./support/load.js";
import { context, fmt, type Result } from "./support/measure.js";
import { startServer } from "./support/server.js";
import { resourceAt, SERIES_PER_BATCH } from "./support/workload.js";
import type { BenchOptions } from "./options.js";
import { ALL_GRANTS } from "../src/access/index.js";

export const CONNECTIONS = 50;
/** Contract silent beyond the issue: a route within half of its statements under pgbench. */
export const STATEMENT_TARGET = 0.5;
/** A route within 0.8 of the floor (the leanest Node service sending its statements prepared), in the same run. */
export const FLOOR_TARGET = 0.8;
/**
 * The service and its floor are driven in turns, ROUNDS times each (seconds
 * split between them), so a burst of the other engineers' work on the
 * shared machine falls on both rather than on one.
 */
export const ROUNDS = 2;
/** A document built once should cost little more than /healthz. */
export const DOCUMENT_TARGET = 0.8;

interface Load {
  readonly rps: number;
  readonly p99: number;
  readonly failures: number;
}

/** Seconds of load before each measured drive, not counted: the JIT and the pool's connections (and their prepared statements) warm up. */
export const WARM_UP_SECONDS = 1;

/** What one line of the benchmark sends: a GET of `path`, or a POST of `body` as JSON. */
export interface LoadRequest {
  readonly path: string;
  readonly body?: unknown;
}

/**
 * What the GETs of the benchmark say they accept: what Node's fetch() sends
 * over http without being asked (browsers add br and zstd). /healthz gets it
 * too, so the documents and their reference are asked alike. The POSTs of the
 * API lines send none, as our clients do: a Connect server compresses answers
 * over 1 KB for a client that asks (docs/benchmarks/load.md, "Throughput under load").
 */
export const ACCEPT_ENCODING = "gzip, deflate";

/** autocannon's options for a request at CONNECTIONS connections (also bench/load-route.ts). */
export function loadOptions(baseUrl: string, req: LoadRequest) {
  const body = req.body === undefined ? undefined : JSON.stringify(req.body);
  return {
    url: baseUrl + req.path,
    connections: CONNECTIONS,
    method: body === undefined ? ("GET" as const) : ("POST" as const),
    headers: body !== undefined ? { "content-type": "application/json" } : { "accept-encoding": ACCEPT_ENCODING },
    ...(body !== undefined ? { body } : {}),
  };
}

async function drive(baseUrl: string, seconds: number, req: LoadRequest, warmUp = true): Promise<Load> {
  const options = loadOptions(baseUrl, req);
  if (warmUp) await autocannon({ ...options, duration: WARM_UP_SECONDS });
  const result = await autocannon({ ...options, duration: seconds });
  return {
    rps: result.requests.average,
    p99: result.latency.p99,
    failures: result.non2xx + result.errors + result.timeouts,
  };
}

/** A parameter as an SQL literal, so pgbench runs the statement with the same values. */
function literal(v: unknown): string {
  if (v === null || v === undefined) return "NULL";
  if (typeof v === "number" || typeof v === "bigint") return String(v);
  if (typeof v === "boolean") return v ? "true" : "false";
  const quote = (s: string) => `'${s.replace(/'/g, "''")}'`;
  if (Array.isArray(v))
    return quote(`{${v.map((x) => `"${String(x).replace(/["\\]/g, (c) => `\\${c}`)}"`).join(",")}}`);
  if (typeof v === "object") return quote(JSON.stringify(v));
  return quote(typeof v === "string" ? v : JSON.stringify(v));
}

/**
 * The statement with its colons kept from pgbench. Under `-M prepared`
 * pgbench reads every `:name` of a command as a variable to bind, quotes or
 * not (the read's `to_char(..., 'HH24:MI:SS')` would ask for variables MI
 * and SS). A string constant holding one is written as the same constant in
 * escape syntax, with the colon as `\x3a`; a `:name` outside a constant (a
 * `::` cast is not one) cannot be sent, and fails here.
 */
export function pgbenchSafe(sql: string): string {
  const name = /[A-Za-z0-9_]/;
  let out = "";
  for (let i = 0; i < sql.length; i++) {
    const c = sql[i]!;
    if (c === "'") {
      let j = i + 1;
      let body = "";
      for (;;) {
        if (j >= sql.length) throw new Error(`unterminated string constant in: ${sql}`);
        if (sql[j] === "'" && sql[j + 1] === "'") {
          body += "'";
          j += 2;
        } else if (sql[j] === "'") break;
        else body += sql[j++]!;
      }
      out += /:[A-Za-z0-9_]/.test(body)
        ? `E'${body.replace(/\\/g, "\\\\").replace(/'/g, "\\'").replace(/:/g, "\\x3a")}'`
        : sql.slice(i, j + 1);
      i = j;
    } else if (c === '"') {
      const j = sql.indexOf('"', i + 1);
      if (j < 0) throw new Error(`unterminated identifier in: ${sql}`);
      if (/:[A-Za-z0-9_]/.test(sql.slice(i, j)))
        throw new Error(`pgbench would bind a variable in identifier ${sql.slice(i, j + 1)}`);
      out += sql.slice(i, j + 1);
      i = j;
    } else if (c === ":" && sql[i + 1] === ":") {
      out += "::";
      i++;
    } else if (c === ":" && name.test(sql[i + 1] ?? "")) {
      throw new Error(`pgbench would bind a variable at ${sql.slice(i, i + 20)}`);
    } else out += c;
  }
  return out;
}

/**
 * One pgbench transaction: the statements of one call, parameters inlined,
 * in a form `-M prepared` runs as they read (pgbenchSafe). Prepared with its
 * values written in, each statement is parsed and planned once per client
 * and then only executed: the most PostgreSQL can do for the call.
 */
export function pgbenchScript(statements: readonly Statement[]): string {
  return statements
    .map(
      (st) =>
        `${pgbenchSafe(st.sql.replace(/\$(\d+)\b/g, (_, n: string) => literal(st.params?.[Number(n) - 1])).trim())};\n`,
    )
    .join("");
}

function pgbenchPath(): string {
  for (const dir of (process.env.PATH ?? "").split(":"))
    if (existsSync(join(dir, "pgbench"))) return join(dir, "pgbench");
  const root = "/usr/lib/postgresql";
  if (existsSync(root)) {
    for (const v of readdirSync(root).sort().reverse())
      if (existsSync(join(root, v, "bin/pgbench"))) return join(root, v, "bin/pgbench");
  }
  throw new Error("pgbench not found (install the PostgreSQL client tools)");
}

/** Transactions per second of the script under pgbench with CONNECTIONS clients, each statement prepared (`-M prepared`). */
async function pgbench(dbUrl: string, script: string, seconds: number): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), "rs-pgbench-"));
  try {
    const file = join(dir, "script.sql");
    await writeFile(file, script);
    const out = await new Promise<string>((resolve, reject) => {
      const child = spawn(
        pgbenchPath(),
        ["-n", "-M", "prepared", "-c", String(CONNECTIONS), "-j", "2", "-T", String(seconds), "-f", file, dbUrl],
        {
          stdio: ["ignore", "pipe", "pipe"],
          env: { ...process.env, PGOPTIONS: SESSION_OPTIONS },
        },
      );
      let text = "";
      child.stdout.on("data", (d: Buffer) => (text += d.toString()));
      child.stderr.on("data", (d: Buffer) => (text += d.toString()));
      child.once("error", reject);
      child.once("exit", (code) =>
        code === 0 ? resolve(text) : reject(new Error(`pgbench exited with ${String(code)}: ${text.slice(-2000)}`)),
      );
    });
    const tps = /tps = ([\d.]+)/.exec(out)?.[1];
    if (tps === undefined) throw new Error(`no tps in pgbench output: ${out.slice(-2000)}`);
    return Number(tps);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The children come with their stored counts (tree_counts) in one statement. */
function childrenAnswers(sql: string): unknown[] | undefined {
  if (/parent_ok/.test(sql)) return [{ parent_ok: true, identifier: null }];
  return undefined;
}

/** One batch: SERIES_PER_BATCH series with 2,000 files each, so each series is a node with 2,000 children. */
export const LOAD_DATA = { childrenEach: 2000, batchSize: SERIES_PER_BATCH * 2001 } as const;

/** Loads the benchmark's rows into the database and names what its routes ask for (also bench/load-route.ts). */
export async function loadTheData(url: string) {
  const { batchSize } = LOAD_DATA;
  await migrateDatabase(url);
  await loadThroughStoreSql(url, "r", 1, batchSize);
  const pgClient = await connect(url);
  try {
    await pgClient.query("ANALYZE");
  } finally {
    await pgClient.end();
  }
  return {
    ids: Array.from({ length: 10 }, (_, k) => resourceAt("r", 100 + k * 997, batchSize).identifier),
    parentOf: "r-s0",
    leaf: resourceAt("r", SERIES_PER_BATCH + 10 * SERIES_PER_BATCH, batchSize).identifier,
    query: {
      payload_type: "file",
      filters: [{ field: "content_type", op: "eq", value: "application/dicom" }],
      sort_by: "created_at",
      sort_order: "desc",
      limit: 20,
    },
  };
}

/** Each line's request, by the line's name. */
export function loadRequests(data: Awaited<ReturnType<typeof loadTheData>>): Record<string, LoadRequest> {
  return {
    healthz: { path: "/healthz" },
    schemas: { path: "/schemas" },
    openapi: { path: "/openapi.json" },
    "s3-config": { path: "/s3/config" },
    "read-rest": { path: "/resources/read", body: { identifiers: data.ids } },
    "read-connect": { path: "/resourcestore.v1.ResourceService/Read", body: { identifiers: data.ids } },
    query: { path: "/query", body: data.query },
    children: { path: `/children?parent_identifier=${data.parentOf}` },
    parents: { path: `/parents/${data.leaf}` },
    stats: { path: "/datasources/stats" },
  };
}

/** The statements each statement route sends, captured from the store's own code (also bench/load-route.ts, for the floor). */
export async function routeStatements(
  data: Awaited<ReturnType<typeof loadTheData>>,
): Promise<Record<string, Statement[]>> {
  const { ids, parentOf, leaf, query } = data;
  const read = await captureStatements((d) => readResources(d, ALL_GRANTS, ids));
  return {
    "read-rest": read,
    "read-connect": read,
    // The page statement the engine sends (the service names it: StatementNames.page).
    query: [
      pageStatement(
        planQuery(fromJson(QueryRequestSchema, query as unknown as JsonObject)),
        { kind: "now" },
        ALL_GRANTS,
        { limit: 21 },
      ),
    ],
    children: await captureStatements(
      (d) => listChildren(d, ALL_GRANTS, { parentIdentifier: parentOf, withPayloads: false }),
      childrenAnswers,
    ),
    parents: await captureStatements(
      (d) => listParents(d, ALL_GRANTS, leaf),
      (q) => (/FROM chain/.test(q) ? [{ identifier: leaf, depth: 0 }] : undefined),
    ),
    stats: await captureStatements((d) => datasourceStats(d, ALL_GRANTS)),
  };
}

export async function loadBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const seconds = opts.quick ? 3 : 10;
  // The cluster decision (docs/benchmarks/load.md, "The cluster decision"): BENCH_LOAD_WORKERS=2 runs the service in node:cluster workers.
  const workers = process.env.BENCH_LOAD_WORKERS === undefined ? undefined : Number(process.env.BENCH_LOAD_WORKERS);
  const pool = process.env.DATABASE_POOL_SIZE ?? "default";
  const { childrenEach, batchSize } = LOAD_DATA;
  context(
    `load: ${fmt(batchSize)} resources (${SERIES_PER_BATCH} series of ${fmt(childrenEach)} files); autocannon ${CONNECTIONS} connections (after ${WARM_UP_SECONDS} s not counted), pgbench -M prepared ${CONNECTIONS} clients, ${seconds} s each (service and floor: ${ROUNDS} rounds of ${Math.max(1, Math.round(seconds / ROUNDS))} s each, in turns); service: ${workers === undefined ? "one process" : `${workers} cluster workers`}, DATABASE_POOL_SIZE ${pool}`,
  );
  return withDatabase(async (db) => {
    const data = await loadTheData(db.url);
    const requests = loadRequests(data);

    const sql = await routeStatements(data);

    // Children are one statement (src/store/lineage.ts); stats are read in one read-only snapshot (src/store/stats.ts): the captured
    // statements carry its BEGIN and COMMIT (support/capture.ts), so pgbench runs them as the service does.
    const server = await startServer({ databaseUrl: db.url, ...(workers !== undefined ? { workers } : {}) });
    const results: Result[] = [];
    try {
      const u = server.url;
      const healthz = await drive(u, seconds, requests.healthz!);
      context(`GET /healthz: ${fmt(healthz.rps)} req/s, p99 ${fmt(healthz.p99)} ms (the HTTP floor of this process)`);
      for (const name of ["schemas", "openapi", "s3-config"]) {
        const req = requests[name]!;
        const l = await drive(u, seconds, req);
        results.push(line(name, `GET ${req.path}`, l, healthz.rps, "/healthz", DOCUMENT_TARGET));
      }
      const routes: { name: string; label: string }[] = [
        { name: "read-rest", label: "POST /resources/read (10 ids)" },
        { name: "read-connect", label: "Connect JSON Read (10 ids)" },
        { name: "query", label: "POST /query (limit 20)" },
        { name: "children", label: `GET /children (${fmt(childrenEach)} children)` },
        { name: "parents", label: "GET /parents/{identifier}" },
        { name: "stats", label: "GET /datasources/stats" },
      ];
      for (const r of routes) {
        const statements = sql[r.name]!;
        const tps = await pgbench(db.url, pgbenchScript(statements), seconds);
        const req = requests[r.name]!;
        if (workers !== undefined) {
          const l = await drive(u, seconds, req);
          results.push(line(r.name, r.label, l, tps, `pgbench ${fmt(tps)} tps`, STATEMENT_TARGET));
          continue;
        }
        const { service: l, floor } = await againstFloor(db.url, u, statements, seconds, req);
        const floorNote = `; floor ${fmt(floor.rps)} req/s (${(floor.rps / tps).toFixed(3)} of pgbench)`;
        results.push(
          line(r.name, r.label, l, tps, `pgbench ${fmt(tps)} tps (-M prepared)${floorNote}`, STATEMENT_TARGET),
        );
        results.push(
          line(
            `${r.name}-vs-floor`,
            r.label,
            l,
            floor.rps,
            `floor ${fmt(floor.rps)} req/s, p99 ${fmt(floor.p99)} ms (${ROUNDS} rounds each, in turns)`,
            FLOOR_TARGET,
          ),
        );
      }
    } finally {
      await server.close();
    }
    return results;
  });
}

/** Starts the floor server of a route's statements (bench/support/floor-server.mjs; also bench/load-route.ts). */
export function startFloor(dbUrl: string, statements: readonly Statement[]) {
  return startServer({
    databaseUrl: dbUrl,
    entry: "bench/support/floor-server.mjs",
    env: { FLOOR_STATEMENTS: JSON.stringify(statements), PG_OPTIONS: SESSION_OPTIONS },
  });
}

/**
 * A statement route against its floor: bench/support/floor-server.mjs, the
 * leanest Node service that sends the route's statements, every one named
 * (prepared), and answers the rows as JSON. The service and the floor are
 * driven in turns (ROUNDS each, `seconds` split between the rounds, both
 * warmed up first); each figure is the mean over its rounds. The floor shows
 * what is Node, pg and HTTP on this machine, and so what the service's own
 * layers cost (docs/benchmarks/load.md, "Round eight" and "Load against prepared floors").
 */
async function againstFloor(
  dbUrl: string,
  serviceUrl: string,
  statements: readonly Statement[],
  seconds: number,
  req: LoadRequest,
): Promise<{ service: Load; floor: Load }> {
  const floor = await startFloor(dbUrl, statements);
  try {
    const each = Math.max(1, Math.round(seconds / ROUNDS));
    const s: Load[] = [];
    const f: Load[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      s.push(await drive(serviceUrl, each, req, round === 0));
      f.push(await drive(floor.url, each, req, round === 0));
    }
    return { service: mean(s), floor: mean(f) };
  } finally {
    await floor.close();
  }
}

function mean(loads: readonly Load[]): Load {
  const avg = (k: keyof Load) => loads.reduce((a, l) => a + l[k], 0) / loads.length;
  return {
    rps: avg("rps"),
    p99: Math.max(...loads.map((l) => l.p99)),
    failures: loads.reduce((a, l) => a + l.failures, 0),
  };
}

function line(name: string, label: string, l: Load, reference: number, referenceLabel: string, target: number): Result {
  const failures = l.failures > 0 ? `, ${fmt(l.failures)} failed` : "";
  return {
    name: `load-${name}`,
    ratio: l.rps / reference,
    op: ">=",
    target,
    note: `${label}: ${fmt(l.rps)} req/s, p99 ${fmt(l.p99)} ms${failures}; reference ${referenceLabel === "/healthz" ? `/healthz ${fmt(reference)} req/s` : referenceLabel}`,
  };
}
