// Statistics per datasource. A resource belongs to the datasource of its
// nearest patient ancestor, or its own datasource_id if it is a patient: the
// attribution section 18 governs access by (resources.datasource_id, kept by
// the writes, store/attribution.ts), whose chain runs through tombstoned
// ancestors too. An active resource left under a tombstone (a narrow
// caller's cascade leaves what it may not see; a restore of a child alone)
// still counts for the datasource it is read under. A `datasource` resource
// is not one of its own datasource's resources.
// The datasources listed are those seen in the registry or on an active
// patient the caller may see (a hidden patient does not list its datasource:
// docs/contract/18-access.md, absent as if it did not exist).
import { seesEverything, type Grants } from "../access/index.js";
import { notFound } from "../errors.js";
import type { Db, Queryable } from "./db.js";
import { named } from "./prepared.js";
import { ts } from "./sql.js";
import { andVisible, grantsDatasource, visibleAt, visibleNow } from "./visibility.js";

export interface DatasourceStatsRow {
  datasourceId: string;
  /** Registered patients. */
  patients: number;
  /** Registered studies (of its registered patients). */
  studies: number;
  /** Active resources attributed to it. */
  resources: number;
  byPayloadType: Record<string, number>;
  byAccessLevel: Record<string, number>;
  /** Sum of the active file.size_bytes, a decimal string (exact beyond 2^53). */
  totalBytes: string;
  /** The last change among its active resources; null when it has none. */
  lastUpdatedAt: string | null;
}

/**
 * Every listed datasource the caller's grants hold, or the one named (404
 * when it is not listed or not granted: absent, as if unknown); sorted by
 * datasource_id (bytes). Resource counts count only what the caller may see.
 * Now: from the counts the writes keep (migration 0023), O(datasources x
 * payload types x levels). At an as_of (least(as_of, clock)): from the log
 * of those counts (migrations 0023 and 0028), with the stricter-of rule of
 * docs/access.md (`collectFromLog`); before the log's start (a point before
 * a restore), from the history (`collectAt`).
 */
export async function datasourceStats(
  db: Db,
  grants: Grants,
  options: { datasourceId?: string; asOf?: string | undefined } = {},
): Promise<DatasourceStatsRow[]> {
  const only = options.datasourceId ?? null;
  if (only !== null && !grantsDatasource(grants, only)) throw notFound(`datasource ${only} is not known`);
  const name = (sql: string) => named(db, sql);
  const asOf = options.asOf;
  // One read-only snapshot, so that the listing and the counts agree.
  const rows = await db.transaction(
    async (q) => {
      if (asOf === undefined) return collect(q, name, grants, only);
      return (await collectFromLog(q, name, grants, only, asOf)) ?? collectAt(q, name, grants, only, asOf);
    },
    { readOnlySnapshot: true },
  );
  if (only !== null && rows.length === 0) throw notFound(`datasource ${only} is not known`);
  return rows;
}

interface ListedRow {
  datasource_id: string;
  patients: string;
  studies: string;
}

interface GroupRow {
  ds: string;
  payload_type: string;
  access_level: string;
  n: string;
  bytes: string;
  last: string | null;
}

/** The read point of an as_of given as parameter $n: least(as_of, clock), as for every read. */
const pointOf = (n: number) => `(SELECT least($${n}::timestamptz, last) FROM clock)`;

/** The grants' datasources as a parameter: null for every one. */
function grantedList(grants: Grants): string[] | null {
  return grants.datasources === "all" ? null : [...grants.datasources];
}

/** Registered patients and studies per datasource (registered by `at`, an SQL timestamptz, when given), for the listed ones. */
function registryCounts(listed: string, at?: string): string {
  const by = at === undefined ? "" : ` WHERE registered_at <= ${at}`;
  const sBy = at === undefined ? "" : ` WHERE s.registered_at <= ${at}`;
  return `WITH listed AS (${listed}),
     patients AS (SELECT datasource_id, count(*) AS n FROM registry_patients${by} GROUP BY datasource_id),
     studies AS (
        SELECT p.datasource_id, count(*) AS n FROM registry_studies s
          JOIN registry_patients p ON p.identifier = s.patient_identifier${sBy} GROUP BY p.datasource_id
     )
     SELECT l.datasource_id, coalesce(p.n, 0)::text AS patients, coalesce(s.n, 0)::text AS studies
       FROM listed l LEFT JOIN patients p USING (datasource_id) LEFT JOIN studies s USING (datasource_id)
      WHERE l.datasource_id IS NOT NULL AND ($1::text IS NULL OR l.datasource_id = $1::text)
        AND ($2::text[] IS NULL OR l.datasource_id = ANY($2::text[]))
      ORDER BY l.datasource_id`;
}

async function collect(
  q: Queryable,
  name: (sql: string) => string,
  grants: Grants,
  only: string | null,
): Promise<DatasourceStatsRow[]> {
  // A datasource is listed when registered or when the caller sees an active patient of it: a
  // patient's datasource_id is its own, so its counted group says so.
  const { rows: listed } = await q.query<ListedRow>(
    name(
      registryCounts(`SELECT datasource_id FROM registry_patients
        UNION
        SELECT c.datasource_id FROM datasource_counts c WHERE c.payload_type = 'patient' AND c.resources > 0${andVisible(visibleNow(grants, "c"))}`),
    ),
    [only, grantedList(grants)],
  );
  if (listed.length === 0) return [];
  const { rows: groups } = await q.query<GroupRow>(
    name(`SELECT c.datasource_id AS ds, c.payload_type, c.access_level, c.resources::text AS n, c.total_bytes::text AS bytes,
            ${ts("c.last_updated_at")} AS last
       FROM datasource_counts c
      WHERE c.resources > 0 AND ($1::text IS NULL OR c.datasource_id = $1::text)${andVisible(visibleNow(grants, "c"))}`),
    [only],
  );
  return assemble(listed, groups);
}

/**
 * At an as_of: each group's values from the log of counts (migrations 0023
 * and 0028), O(groups); undefined when the read point lies before the log's
 * start (after a restore of a dump without a log: the history answers then). For narrower grants,
 * the groups the caller may see (datasource and level as they were) less
 * the resources the stricter-of rule (docs/access.md) hides: visible then
 * and hidden now, which only a change after the point can make (their row
 * rewritten, or their attribution period started, after it; `hiddenSince`),
 * so the cost follows the changes since the point, not the store. When a
 * hidden resource may have been its group's last change, the group's last
 * change is found by `lastSeen`.
 */
async function collectFromLog(
  q: Queryable,
  name: (sql: string) => string,
  grants: Grants,
  only: string | null,
  asOf: string,
): Promise<DatasourceStatsRow[] | undefined> {
  const { rows: start } = await q.query<{ covered: boolean }>(
    name(`SELECT (SELECT since FROM datasource_counts_since) <= ${pointOf(1)} AS covered`),
    [asOf],
  );
  if (start[0]?.covered !== true) return undefined;
  const atT = (alias: string, t: string) => `CROSS JOIN LATERAL (
          SELECT l.resources, l.total_bytes, l.last_updated_at FROM datasource_counts_log l
           WHERE l.datasource_id = ${alias}.datasource_id AND l.payload_type = ${alias}.payload_type AND l.access_level = ${alias}.access_level
             AND l.tx_from <= ${t}
           ORDER BY l.tx_from DESC LIMIT 1) l`;
  const { rows: logged } = await q.query<GroupRow>(
    name(`SELECT c.datasource_id AS ds, c.payload_type, c.access_level, l.resources::text AS n, l.total_bytes::text AS bytes,
            ${ts("l.last_updated_at")} AS last
       FROM datasource_counts c ${atT("c", pointOf(2))}
      WHERE l.resources > 0 AND ($1::text IS NULL OR c.datasource_id = $1::text)${andVisible(visibleNow(grants, "c"))}`),
    [only, asOf],
  );
  let groups = logged;
  if (!seesEverything(grants)) {
    const { kept, lastUnknown } = subtractHidden(logged, await hiddenSince(q, name, grants, only, asOf));
    groups = kept;
    for (const g of lastUnknown) groups.push({ ...g, last: await lastSeen(q, name, grants, g, asOf) });
  }
  // Listed: registered by the point, or with an active patient the caller may see then.
  const withPatients = [...new Set(groups.filter((g) => g.payload_type === "patient").map((g) => g.ds))];
  const { rows: listed } = await q.query<ListedRow>(
    name(
      registryCounts(
        `SELECT datasource_id FROM registry_patients WHERE registered_at <= ${pointOf(3)}
        UNION
        SELECT unnest($4::text[]) COLLATE "C"`,
        pointOf(3),
      ),
    ),
    [only, grantedList(grants), asOf, withPatients],
  );
  return listed.length === 0 ? [] : assemble(listed, groups);
}

/**
 * Per group (datasource and level at the point): the resources active at
 * the point that the caller may see as they read then but not as they read
 * now. Only a change after the point makes them: their current row written
 * after it (a level raised, a move, a tombstone), or an attribution period
 * started after it (their patient's datasource changed, or an ancestor moved
 * to another patient).
 */
async function hiddenSince(
  q: Queryable,
  name: (sql: string) => string,
  grants: Grants,
  only: string | null,
  asOf: string,
): Promise<GroupRow[]> {
  const t = pointOf(2);
  const { rows } = await q.query<GroupRow>(
    name(`WITH changed AS (
        SELECT r.identifier FROM resources r WHERE r.updated_at > ${t}
        UNION
        SELECT a.identifier FROM resource_attribution a WHERE a.tx_from > ${t}
      )
      SELECT a.datasource_id AS ds, v.payload_type, v.access_level, count(*)::text AS n,
             coalesce(sum((v.payload->>'size_bytes')::numeric) FILTER (WHERE v.payload_type = 'file'), 0)::text AS bytes,
             ${ts("max(v.updated_at)")} AS last
        FROM changed c
        JOIN resource_history v ON v.identifier = c.identifier AND v.tx_from <= ${t} AND v.tx_to > ${t}
        JOIN resource_attribution a ON a.identifier = c.identifier AND a.tx_from <= ${t} AND a.tx_to > ${t}
        CROSS JOIN LATERAL (SELECT a.datasource_id, v.access_level) g
       WHERE NOT v.is_deleted AND v.payload_type <> 'datasource'
         AND ($1::text IS NULL OR a.datasource_id = $1::text)${andVisible(visibleNow(grants, "g"))}
         AND NOT ${visibleAt(grants, "v", t) ?? "true"}
       GROUP BY a.datasource_id, v.payload_type, v.access_level`),
    [only, asOf],
  );
  return rows;
}

/**
 * The logged groups less the hidden ones. A group whose last change may be
 * held by a hidden resource comes back apart (`lastUnknown`, its counts
 * already less the hidden): its last change is another resource's.
 */
function subtractHidden(logged: GroupRow[], hidden: GroupRow[]): { kept: GroupRow[]; lastUnknown: GroupRow[] } {
  const key = (g: GroupRow) => `${g.ds}\u0000${g.payload_type}\u0000${g.access_level}`;
  const less = new Map(hidden.map((h) => [key(h), h]));
  const kept: GroupRow[] = [];
  const lastUnknown: GroupRow[] = [];
  for (const g of logged) {
    const h = less.get(key(g));
    if (h === undefined) {
      kept.push(g);
      continue;
    }
    const n = Number(g.n) - Number(h.n);
    if (n <= 0) continue;
    const rest = { ...g, n: String(n), bytes: (BigInt(g.bytes) - BigInt(h.bytes)).toString() };
    // Fixed-width UTC stamps compare as strings.
    if (h.last !== null && (g.last === null || h.last >= g.last)) lastUnknown.push(rest);
    else kept.push(rest);
  }
  return { kept, lastUnknown };
}

/**
 * The last change among a group's resources active at the point that the
 * caller may see (the stricter-of rule): the newest such version, walking
 * the versions from the group's logged last change back (a version's
 * updated_at is its tx_from: migration 0006), through the two time indexes
 * (resources_updated_idx, resource_versions_tx_from_idx); the walk stops at
 * the first version of the group the caller sees, and passes only versions
 * written between that one and the hidden one.
 */
async function lastSeen(
  q: Queryable,
  name: (sql: string) => string,
  grants: Grants,
  g: GroupRow,
  asOf: string,
): Promise<string | null> {
  const t = pointOf(1);
  const { rows } = await q.query<{ last: string }>(
    name(`SELECT ${ts("v.tx_from")} AS last
       FROM resource_history v
       JOIN resource_attribution a ON a.identifier = v.identifier AND a.tx_from <= ${t} AND a.tx_to > ${t}
      WHERE v.tx_from <= coalesce($5::timestamptz, ${t}) AND v.tx_to > ${t} AND NOT v.is_deleted
        AND v.payload_type = $3::text AND v.access_level = $4::text AND a.datasource_id = $2::text${andVisible(visibleAt(grants, "v", t))}
      ORDER BY v.tx_from DESC LIMIT 1`),
    [asOf, g.ds, g.payload_type, g.access_level, g.last],
  );
  return rows[0]?.last ?? null;
}

/**
 * At an as_of before the log starts (a restored dump, whose versions carry
 * stamps of their own: the log starts at the restore; migration 0028
 * derived it for every store migrated before): from the history, per
 * resource, with the stricter-of rule of docs/access.md.
 */
async function collectAt(
  q: Queryable,
  name: (sql: string) => string,
  grants: Grants,
  only: string | null,
  asOf: string,
): Promise<DatasourceStatsRow[]> {
  let t = pointOf(3);
  const { rows: listed } = await q.query<ListedRow>(
    name(
      registryCounts(
        `SELECT datasource_id FROM registry_patients WHERE registered_at <= ${t}
        UNION
        SELECT (v.payload->>'datasource_id') COLLATE "C" FROM resource_history v
         WHERE v.payload_type = 'patient' AND v.tx_from <= ${t} AND v.tx_to > ${t} AND NOT v.is_deleted${andVisible(visibleAt(grants, "v", t))}`,
        t,
      ),
    ),
    [only, grantedList(grants), asOf],
  );
  if (listed.length === 0) return [];
  // The version of each resource at t, attributed to the datasource of its period holding t.
  t = pointOf(2);
  const { rows: groups } = await q.query<GroupRow>(
    name(`SELECT a.datasource_id AS ds, v.payload_type, v.access_level, count(*)::text AS n,
            coalesce(sum((v.payload->>'size_bytes')::numeric) FILTER (WHERE v.payload_type = 'file'), 0)::text AS bytes,
            ${ts("max(v.updated_at)")} AS last
       FROM resource_history v
       JOIN resource_attribution a ON a.identifier = v.identifier AND a.tx_from <= ${t} AND a.tx_to > ${t}
      WHERE v.tx_from <= ${t} AND v.tx_to > ${t} AND NOT v.is_deleted AND v.payload_type <> 'datasource'
        AND ($1::text IS NULL OR a.datasource_id = $1::text)${andVisible(visibleAt(grants, "v", t))}
      GROUP BY a.datasource_id, v.payload_type, v.access_level`),
    [only, asOf],
  );
  return assemble(listed, groups);
}

function assemble(listed: ListedRow[], groups: GroupRow[]): DatasourceStatsRow[] {
  const out = new Map<string, DatasourceStatsRow>(
    listed.map((l) => [
      l.datasource_id,
      {
        datasourceId: l.datasource_id,
        patients: Number(l.patients),
        studies: Number(l.studies),
        resources: 0,
        byPayloadType: {},
        byAccessLevel: {},
        totalBytes: "0",
        lastUpdatedAt: null,
      },
    ]),
  );
  for (const g of groups) {
    const s = out.get(g.ds);
    // Every active patient's datasource is listed, so this only skips a datasource filtered out.
    if (!s) continue;
    const n = Number(g.n);
    s.resources += n;
    s.byPayloadType[g.payload_type] = (s.byPayloadType[g.payload_type] ?? 0) + n;
    s.byAccessLevel[g.access_level] = (s.byAccessLevel[g.access_level] ?? 0) + n;
    // numeric sums print as whole numbers here (size_bytes is int64).
    s.totalBytes = (BigInt(s.totalBytes) + BigInt(g.bytes)).toString();
    // Fixed-width UTC stamps compare as strings.
    if (g.last !== null && (s.lastUpdatedAt === null || g.last > s.lastUpdatedAt)) s.lastUpdatedAt = g.last;
  }
  return [...out.values()];
}
