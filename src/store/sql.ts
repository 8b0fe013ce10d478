// SQL fragments shared by the store's statements.
import type { JsonObject } from "@bufbuild/protobuf";
import type { Queryable } from "./db.js";
import type { StoredResource } from "./types.js";

/** A timestamptz as RFC 3339 UTC with exactly six fractional digits. */
export function ts(expr: string): string {
  return `to_char(${expr} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

/** The select list of a resource row (from `resources`, `resource_versions` or `resource_history`) aliased `a`. */
export function resourceColumns(a: string): string {
  return `${a}.identifier, ${a}.payload_type, ${a}.parent_identifier, ${a}.license, ${a}.access_level,
    ${a}.derived_from, ${a}.payload, ${ts(`${a}.created_at`)} AS created_at, ${ts(`${a}.updated_at`)} AS updated_at,
    ${a}.version::text AS version`;
}

/** The client-written columns of `resources` and `resource_versions`, as the tables hold them. */
export interface WritableRow {
  identifier: string;
  payload_type: string;
  parent_identifier: string | null;
  license: string | null;
  access_level: string;
  derived_from: string[];
  payload: JsonObject;
}

export interface ResourceRow extends WritableRow {
  created_at: string;
  updated_at: string;
  version: string;
  children?: string[] | null;
}

export function toStoredResource(row: ResourceRow, withChildren: boolean): StoredResource {
  const out: StoredResource = {
    identifier: row.identifier,
    payloadType: row.payload_type,
    parentIdentifier: row.parent_identifier,
    license: row.license,
    accessLevel: row.access_level,
    derivedFrom: row.derived_from,
    payload: row.payload,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    version: Number(row.version),
  };
  if (withChildren) out.children = row.children ?? [];
  return out;
}

/**
 * Takes the clock: the first statement of every write transaction. The row
 * lock serialises writers, so later READ COMMITTED statements of this
 * transaction see every earlier commit; the stamp strictly increases.
 */
export async function tickClock(tx: Queryable): Promise<string> {
  const { rows } = await tx.query<{ at: string }>(
    `UPDATE clock SET last = greatest(clock_timestamp(), last + interval '1 microsecond') RETURNING ${ts("last")} AS at`,
  );
  const at = rows[0]?.at;
  if (at === undefined) throw new Error("clock row missing");
  return at;
}

/** A short list of identifiers for an error message. */
export function listIds(ids: readonly string[], max = 5): string {
  const shown = ids.slice(0, max).join(", ");
  return ids.length > max ? `${shown} and ${ids.length - max} more` : shown;
}
