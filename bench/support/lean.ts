// The fixed lean reference of the create benchmark (docs/benchmarks/create.md, "storage change and lean reference"): what PostgreSQL
// itself can do for a bitemporal batch create, with nothing of the service.
// A minimal schema (resources and resource_versions with their primary keys,
// an index on parent_identifier, one on (payload_type, created_at,
// identifier), one on (identifier, tx_from, tx_to), a clock row) and per batch
// one transaction: one clock tick and two INSERT ... SELECT FROM unnest(...)
// (the current rows and their open versions), each payload written twice as
// the reference does. It does not depend on the store's code, so a
// change to the store's SQL leaves the reference where it is.
//
// How a batch takes its commit stamp (docs/benchmarks/writers.md, "The writers'
// ceiling"), `StampMode`:
// - "clock": the row `clock` (last stamp), updated first and held until
//   commit, as the store does: writers commit one at a time, in stamp order;
// - "free": `clock_timestamp()` alone, no shared row: what writers cost with
//   nothing making them wait for each other (as_of would not be exact);
// - "horizon": the design of docs/benchmarks/writers.md, "A design that commits
//   writers in parallel": a shared advisory lock (structural writes would take it exclusively), the
//   transaction's xid assigned, then a stamp from a sequence, in one call of
//   `take_stamp()`; no row is written, no writer waits for another.
//
// With `actor`, both tables carry an `actor text NOT NULL` column,
// written from one parameter per batch as the store writes its caller's: the
// same reference with the one column the history added, so the create
// benchmark can say what the column costs in the same run.
import type pg from "pg";
import { connect } from "./database.js";
import { batchAt } from "./workload.js";
import type { NewResource } from "../../src/store/index.js";

const SCHEMA = `
CREATE TABLE clock (id boolean PRIMARY KEY DEFAULT true CHECK (id), last timestamptz NOT NULL);
INSERT INTO clock (id, last) VALUES (true, '-infinity');
CREATE TABLE resources (
  identifier text COLLATE "C" PRIMARY KEY,
  payload_type text NOT NULL,
  parent_identifier text COLLATE "C",
  license text,
  access_level text NOT NULL,
  derived_from text[] NOT NULL,
  payload jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  version bigint NOT NULL,
  is_deleted boolean NOT NULL DEFAULT false
);
CREATE INDEX resources_parent_idx ON resources (parent_identifier);
CREATE INDEX resources_type_created_idx ON resources (payload_type, created_at, identifier);
CREATE TABLE resource_versions (
  identifier text COLLATE "C" NOT NULL,
  version bigint NOT NULL,
  tx_from timestamptz NOT NULL,
  tx_to timestamptz NOT NULL,
  payload_type text NOT NULL,
  parent_identifier text COLLATE "C",
  license text,
  access_level text NOT NULL,
  derived_from text[] NOT NULL,
  payload jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  is_deleted boolean NOT NULL DEFAULT false,
  PRIMARY KEY (identifier, version)
);
CREATE INDEX resource_versions_period_idx ON resource_versions (identifier, tx_from, tx_to);
`;

/** Stamps in microseconds since 1970 from a sequence; the xid is assigned before the stamp is drawn. */
const HORIZON_SCHEMA = `
CREATE SEQUENCE stamps START WITH 1;
SELECT setval('stamps', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
CREATE FUNCTION take_stamp() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(35);
  PERFORM pg_current_xact_id();
  RETURN (timestamptz 'epoch' + nextval('stamps') * interval '1 microsecond')::text;
END $$;
`;

export type StampMode = "clock" | "free" | "horizon";

const TAKE_STAMP: Record<StampMode, string> = {
  clock:
    "UPDATE clock SET last = greatest(clock_timestamp(), last + interval '1 microsecond') RETURNING last::text AS at",
  free: "SELECT clock_timestamp()::text AS at",
  horizon: "SELECT take_stamp() AS at",
};

/** The schema, with the actor column when asked. */
function schema(actor: boolean): string {
  return actor
    ? SCHEMA.replace(
        /\n {2}is_deleted boolean NOT NULL DEFAULT false/g,
        "\n  is_deleted boolean NOT NULL DEFAULT false,\n  actor text NOT NULL",
      )
    : SCHEMA;
}

/** An insert, with the actor column written from $9 when asked. */
function withActor(sql: string, actor: boolean, select: string): string {
  if (!actor) return sql;
  return sql.replace(/\)\nSELECT /, ", actor)\nSELECT ").replace(select, `${select}, $9::text`);
}

const INSERT_CURRENT = `
INSERT INTO resources (identifier, payload_type, parent_identifier, license, access_level, derived_from, payload,
    created_at, updated_at, version)
SELECT u.identifier, u.payload_type, u.parent_identifier, u.license, u.access_level, u.derived_from::text[], u.payload,
    $8::timestamptz, $8::timestamptz, 1
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[])
    AS u(identifier, payload_type, parent_identifier, license, access_level, derived_from, payload)`;

const INSERT_VERSIONS = `
INSERT INTO resource_versions (identifier, version, tx_from, tx_to, payload_type, parent_identifier, license,
    access_level, derived_from, payload, created_at)
SELECT u.identifier, 1, $8::timestamptz, 'infinity', u.payload_type, u.parent_identifier, u.license, u.access_level,
    u.derived_from::text[], u.payload, $8::timestamptz
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[])
    AS u(identifier, payload_type, parent_identifier, license, access_level, derived_from, payload)`;

export const LEAN_COUNT = "SELECT (SELECT count(*) FROM resources) AS r, (SELECT count(*) FROM resource_versions) AS v";

/** The column arrays of one batch (derived_from as array literals, payloads as JSON text). */
function columns(batch: readonly NewResource[]): unknown[] {
  const arrayLiteral = (xs: readonly string[]) => `{${xs.map((x) => JSON.stringify(x)).join(",")}}`;
  return [
    batch.map((r) => r.identifier),
    batch.map((r) => r.payloadType),
    batch.map((r) => r.parentIdentifier ?? null),
    batch.map((r) => r.license ?? null),
    batch.map((r) => r.accessLevel ?? "internal"),
    batch.map((r) => arrayLiteral(r.derivedFrom ?? [])),
    batch.map((r) => JSON.stringify(r.payload)),
  ];
}

async function writeBatch(client: pg.Client, params: unknown[], stamp: StampMode, actor: boolean): Promise<void> {
  await client.query("BEGIN");
  try {
    const { rows } = await client.query<{ at: string }>(TAKE_STAMP[stamp]);
    const withStamp = [...params, rows[0]!.at, ...(actor ? ["token#1"] : [])];
    await client.query(withActor(INSERT_CURRENT, actor, "$8::timestamptz, $8::timestamptz, 1"), withStamp);
    await client.query(withActor(INSERT_VERSIONS, actor, "u.payload, $8::timestamptz"), withStamp);
    await client.query("COMMIT");
  } catch (err) {
    await client.query("ROLLBACK");
    throw err;
  }
}

/** A writer of the workload's batches into the lean schema, `concurrency` connections. */
export async function leanWriter(
  url: string,
  prefix: string,
  batches: number,
  batchSize: number,
  concurrency: number,
  { stamp = "clock", actor = false }: { stamp?: StampMode; actor?: boolean } = {},
) {
  const setup = await connect(url);
  try {
    await setup.query(schema(actor));
    if (stamp === "horizon") await setup.query(HORIZON_SCHEMA);
  } finally {
    await setup.end();
  }
  const params = Array.from({ length: batches }, (_, b) => columns(batchAt(prefix, b, batchSize)));
  const clients = await Promise.all(Array.from({ length: concurrency }, () => connect(url)));
  const idle = [...clients];
  const write = async (b: number): Promise<void> => {
    const client = idle.pop()!;
    try {
      await writeBatch(client, params[b]!, stamp, actor);
    } finally {
      idle.push(client);
    }
  };
  return { write, close: () => Promise.all(clients.map((c) => c.end())).then(() => undefined) };
}
