// Batch create over gRPC and over REST against a fixed lean reference (issue
// 13): the same rows written straight through `pg` into a minimal bitemporal
// schema (lean.ts), one clock tick and two INSERT ... SELECT FROM unnest(...)
// a batch. Ratios = service rows/s over reference rows/s; targets 0.7 (gRPC)
// and 0.6 (REST). The store's own statements replayed through pg are kept as
// a context line (what the service's JavaScript costs over its SQL).
import { createResourceStoreClient } from "../src/client/index.js";
import { createResources } from "../src/store/index.js";
import { captureStatements, replay, type Statement } from "./support/capture.js";
import { connect, withDatabase } from "./support/database.js";
import { context, fmt, timed, type Result } from "./support/measure.js";
import { migrateDatabase } from "./support/load.js";
import { startServer } from "./support/server.js";
import { leanWriter, LEAN_COUNT } from "./support/lean.js";
import { batchAt, toFlat, toMessage } from "./support/workload.js";
import type { BenchOptions } from "./options.js";
import { LOCAL_CALLER } from "../src/access/index.js";

export const CREATE_GRPC_TARGET = 0.7;
/** The reference with the actor column within 5% of the reference without it. */
export const CREATE_ACTOR_TARGET = 0.95;
export const CREATE_REST_TARGET = 0.6;

/** The statements the store sends for each batch, captured from its own code. */
async function baselineStatements(prefix: string, batches: number, batchSize: number): Promise<Statement[][]> {
  const out: Statement[][] = [];
  for (let b = 0; b < batches; b++)
    out.push(await captureStatements((db) => createResources(db, LOCAL_CALLER, batchAt(prefix, b, batchSize))));
  return out;
}

/** Every version the store holds: resource_history (current rows and superseded ones). */
const STORE_COUNT = "SELECT (SELECT count(*) FROM resources) AS r, (SELECT count(*) FROM resource_history) AS v";

async function countRows(url: string, sql: string): Promise<{ resources: number; versions: number }> {
  const c = await connect(url);
  try {
    const { rows } = await c.query<{ r: string; v: string }>(sql);
    return { resources: Number(rows[0]?.r), versions: Number(rows[0]?.v) };
  } finally {
    await c.end();
  }
}

function checkWritten(what: string, got: { resources: number; versions: number }, expected: number): void {
  if (got.resources !== expected || got.versions !== expected) {
    throw new Error(
      `${what} wrote ${got.resources} resources and ${got.versions} versions, expected ${expected} of each`,
    );
  }
}

/** A writer of batch `b`; several run at once, like a client with `concurrency` batches in flight. */
export type Writer = (b: number) => Promise<void>;

export async function baselineWriter(
  url: string,
  prefix: string,
  batches: number,
  batchSize: number,
  concurrency: number,
) {
  await migrateDatabase(url);
  const statements = await baselineStatements(prefix, batches, batchSize);
  const clients = await Promise.all(Array.from({ length: concurrency }, () => connect(url)));
  const idle = [...clients];
  const write: Writer = async (b) => {
    const client = idle.pop()!;
    try {
      await replay(client, statements[b]!);
    } finally {
      idle.push(client);
    }
  };
  return { write, close: () => Promise.all(clients.map((c) => c.end())).then(() => undefined) };
}

export function serviceWriter(
  surface: "grpc" | "rest",
  url: string,
  prefix: string,
  batches: number,
  batchSize: number,
): Writer {
  if (surface === "grpc") {
    const client = createResourceStoreClient({ baseUrl: url, transport: "grpc" });
    const messages = Array.from({ length: batches }, (_, b) => batchAt(prefix, b, batchSize).map(toMessage));
    const write: Writer = async (b) => {
      const res = await client.resources.create({ resources: messages[b]! });
      if (res.created !== BigInt(batchSize)) throw new Error(`created ${res.created}`);
    };
    return write;
  }
  const bodies = Array.from({ length: batches }, (_, b) => batchAt(prefix, b, batchSize).map(toFlat));
  const write: Writer = async (b) => {
    const res = await fetch(`${url}/resources/create`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ resources: bodies[b] }),
    });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`REST create answered ${res.status}: ${text}`);
  };
  return write;
}

/** Batches first..last-1 with `concurrency` in flight; returns the seconds taken. */
async function writeRange(write: Writer, first: number, last: number, concurrency: number): Promise<number> {
  let next = first;
  const { seconds } = await timed(() =>
    Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < last) await write(next++);
      }),
    ),
  );
  return seconds;
}

export interface CreateRun {
  /** rows/s of each writer, measured in interleaved rounds so load changes on the machine hit all alike. */
  readonly rates: Record<string, number>;
}

/**
 * Runs the writers round by round (a slice of batches each, writer after
 * writer) into their own databases, then checks every database holds exactly
 * the rows and versions written. First each writer writes `warmUp` batches
 * (numbered from `batches` on) that are not timed: a fresh server runs its
 * first batches on cold code and connections, which a 20-batch quick run
 * would otherwise count against it and not against the SQL baselines.
 */
export async function interleaved(
  writers: Record<string, { write: Writer; countUrl: string | undefined; countSql?: string }>,
  batches: number,
  batchSize: number,
  concurrency: number,
  rounds: number,
  warmUp = 0,
): Promise<Record<string, number>> {
  const seconds: Record<string, number> = Object.fromEntries(Object.keys(writers).map((k) => [k, 0]));
  for (const w of Object.values(writers)) await writeRange(w.write, batches, batches + warmUp, concurrency);
  const per = Math.ceil(batches / rounds);
  for (let first = 0; first < batches; first += per) {
    const last = Math.min(batches, first + per);
    for (const [name, w] of Object.entries(writers))
      seconds[name]! += await writeRange(w.write, first, last, concurrency);
  }
  for (const [name, w] of Object.entries(writers)) {
    if (w.countUrl !== undefined)
      checkWritten(name, await countRows(w.countUrl, w.countSql ?? STORE_COUNT), (batches + warmUp) * batchSize);
  }
  return Object.fromEntries(Object.entries(seconds).map(([k, s]) => [k, (batches * batchSize) / s]));
}

export async function createBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const batchSize = 1000;
  const batches = opts.quick ? 20 : 200;
  const concurrency = 2;
  const rounds = opts.quick ? 4 : 10;
  const warmUp = 2;
  const written = batches + warmUp;
  context(
    `batch create: ${fmt(batches)} batches of ${fmt(batchSize)} (10 series + 990 files with a parent in the batch), ` +
      `${concurrency} batches in flight, lean reference / store's statements / gRPC / REST interleaved in ${rounds} rounds, ` +
      `after ${warmUp} batches each not timed`,
  );
  return withDatabase((actorDb) =>
    withDatabase((leanDb) =>
      withDatabase((blDb) =>
        withDatabase((grpcDb) =>
          withDatabase(async (restDb) => {
            const lean = await leanWriter(leanDb.url, "ln", written, batchSize, concurrency);
            // The same reference with the actor column: what the column costs the engine.
            const leanActor = await leanWriter(actorDb.url, "la", written, batchSize, concurrency, { actor: true });
            const baseline = await baselineWriter(blDb.url, "bl", written, batchSize, concurrency);
            const grpcServer = await startServer({ databaseUrl: grpcDb.url });
            const restServer = await startServer({ databaseUrl: restDb.url });
            try {
              const rates = await interleaved(
                {
                  lean: { write: lean.write, countUrl: leanDb.url, countSql: LEAN_COUNT },
                  leanActor: { write: leanActor.write, countUrl: actorDb.url, countSql: LEAN_COUNT },
                  pg: { write: baseline.write, countUrl: blDb.url },
                  grpc: {
                    write: serviceWriter("grpc", grpcServer.url, "grpc", written, batchSize),
                    countUrl: grpcDb.url,
                  },
                  rest: {
                    write: serviceWriter("rest", restServer.url, "rest", written, batchSize),
                    countUrl: restDb.url,
                  },
                },
                batches,
                batchSize,
                concurrency,
                rounds,
                warmUp,
              );
              const limit = rates.lean!;
              context(`lean reference (minimal schema, unnest, through pg): ${fmt(limit)} rows/s`);
              context(
                `lean reference with an actor column: ${fmt(rates.leanActor!)} rows/s (${fmt(rates.leanActor! / limit, 2)} of the reference)`,
              );
              context(
                `the store's statements through pg: ${fmt(rates.pg!)} rows/s (${fmt(rates.pg! / limit, 2)} of the reference)`,
              );
              context(`gRPC: ${fmt(rates.grpc!)} rows/s, REST: ${fmt(rates.rest!)} rows/s`);
              context(
                `over the store's statements: gRPC ${fmt(rates.grpc! / rates.pg!, 2)}, REST ${fmt(rates.rest! / rates.pg!, 2)}`,
              );
              return [
                { name: "create-grpc-vs-limit", ratio: rates.grpc! / limit, op: ">=", target: CREATE_GRPC_TARGET },
                { name: "create-rest-vs-limit", ratio: rates.rest! / limit, op: ">=", target: CREATE_REST_TARGET },
                { name: "create-actor-column", ratio: rates.leanActor! / limit, op: ">=", target: CREATE_ACTOR_TARGET },
              ];
            } finally {
              await Promise.all([
                grpcServer.close(),
                restServer.close(),
                baseline.close(),
                lean.close(),
                leanActor.close(),
              ]);
            }
          }),
        ),
      ),
    ),
  );
}
