// Dump and restore (docs/dump-format.md): a store built by a random history on PGlite, dumped and
// restored into PostgreSQL and into PGlite again, answers every read path as
// the source does at 50 random instants of that history: reads (with
// children), queries (filters, sorts, pages through cursors), counts,
// children, parents, the history of a resource, the latest artefact, and the
// change feed replayed from the start; under several callers' grants, so the
// datasource attribution restored (store/attribution.ts) decides the same
// visibility. The registry resolves every uid it registered to the same
// identifier, and the attribution tables are equal row for row.
//
// The history (a seeded generator; DUMP_EQUIVALENCE_SEED picks another)
// uses every verb: creates (under the registry's server-side identifiers
// for patients and studies, artefacts, creates over tombstones), updates
// (payload, license, access level, derived_from, a patient's datasource),
// re-parenting, cascading and single deletes and restores, written by
// several actors through different callers (one with narrower grants,
// whose writes outside them are refused). Refused writes write nothing, as
// in production.
import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { create, fromJson, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import { ALL_GRANTS, type Caller, type Grants } from "../../src/access/index.js";
import {
  createQueryEngine,
  createRegistry,
  createResourceStore,
  createResources,
  datasourceStats,
  deleteResources,
  latestArtefact,
  listChildren,
  listParents,
  loadRegistryKeys,
  migrate,
  openDatabase,
  planQuery,
  readHistoryPage,
  readResources,
  restoreDump,
  restoreResources,
  ts,
  updateResources,
  type Db,
  type EventFilter,
  type NewResource,
  type QueryEngine,
  type QueryPlan,
  type ResourcePatch,
} from "../../src/store/index.js";
import { callerWith } from "../support/caller.js";
import { dumpToBuffer, pgliteStores } from "./dump-support.js";
import { createTestDatabase, postgresReachable, REQUIRE_POSTGRES, type TestDatabase } from "../support/postgres.js";
import { fromMicros, micros } from "./helpers.js";

const SEED = Number(process.env.DUMP_EQUIVALENCE_SEED ?? 3401);
const STEPS = 220;
const INSTANTS = 50;

/** A small deterministic generator: the same seed, the same history. */
function prng(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return x / 2 ** 32;
  };
}

const secretText = randomBytes(32).toString("base64url");
const configured = [{ id: "default", secret: secretText }];
const registryKeys = [{ id: "default", secret: Buffer.from(secretText, "utf8") }];
const CURSOR_SECRET = "dump-equivalence-cursor-secret";

const DATASOURCES = ["ds-a", "ds-b", "ds-c"] as const;
const ONLY_A: Grants = { datasources: new Set(["ds-a"]), clearance: "restricted" };
const PUBLIC_AB: Grants = { datasources: new Set(["ds-a", "ds-b"]), clearance: "public" };
const INTERNAL_ALL: Grants = { datasources: "all", clearance: "internal" };
/** The grants every read is also made under: each sees another part of the store through its attribution. */
const GRANTS: readonly { name: string; grants: Grants }[] = [
  { name: "all", grants: ALL_GRANTS },
  { name: "ds-a", grants: ONLY_A },
  { name: "public ds-a ds-b", grants: PUBLIC_AB },
  { name: "internal", grants: INTERNAL_ALL },
];
const CALLERS: readonly Caller[] = [
  callerWith(ALL_GRANTS, "alice"),
  callerWith(ALL_GRANTS, "bob"),
  callerWith(ONLY_A, "carol@ds-a"),
];

interface Registered {
  readonly datasource: string;
  readonly mrn: string;
  readonly patient: string;
  readonly studies: { readonly accession: string; readonly study: string }[];
}

interface Built {
  /** Every identifier the history named. */
  readonly identifiers: string[];
  readonly registered: Registered[];
  /** How many writes the store took, and refused. */
  readonly written: number;
  readonly refused: number;
}

const ARTEFACT_KEYS = [
  { repo: "org/models", branch: "main", path: "unet.onnx" },
  { repo: "org/models", branch: "dev", path: "unet.onnx" },
  { repo: "org/tools", branch: "main", path: "report.json" },
] as const;

/** The random history, written through the store's API. */
async function buildHistory(db: Db, seed: number): Promise<Built> {
  const random = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const chance = (p: number) => random() < p;
  const registry = createRegistry({ db, keys: registryKeys });
  const identifiers: string[] = [];
  const registered: Registered[] = [];
  let written = 0;
  let refused = 0;
  let n = 0;
  const attempt = async (write: () => Promise<unknown>): Promise<void> => {
    try {
      await write();
      written++;
    } catch (err) {
      refused++;
      if (process.env.DUMP_EQUIVALENCE_DEBUG) console.log(String(err));
    }
  };
  const caller = () => pick(CALLERS);
  const level = () => pick(["public", "internal", "internal", "restricted"]);
  const anyId = () => (identifiers.length === 0 ? null : pick(identifiers));
  /** Mostly an active (or tombstoned) resource, sometimes any identifier named so far (which the store may refuse). */
  const target = async (deleted: boolean, except: readonly string[] = []): Promise<string | null> => {
    if (chance(0.1)) return anyId();
    // In the order of creation, not of the identifiers (the registry's are random): the seed alone decides the history.
    const { rows } = await db.query<{ identifier: string }>(
      "SELECT identifier FROM resources WHERE is_deleted = $1 ORDER BY created_at, identifier",
      [deleted],
    );
    const xs = rows.map((r) => r.identifier).filter((id) => !except.includes(id));
    return xs.length === 0 ? anyId() : pick(xs);
  };

  // Datasources first, as roots.
  await createResources(
    db,
    CALLERS[0]!,
    DATASOURCES.map((id) => ({
      identifier: id,
      payloadType: "datasource",
      parentIdentifier: null,
      accessLevel: "public",
      payload: { name: `source ${id}` },
    })),
  );
  identifiers.push(...DATASOURCES);

  for (let step = 0; step < STEPS; step++) {
    const op = pick([
      "patient",
      "patient",
      "study",
      "study",
      "leaves",
      "leaves",
      "artefact",
      "update",
      "update",
      "update",
      "reparent",
      "reparent",
      "delete",
      "delete",
      "restore",
      "restore",
      "recreate",
      "move-patient",
      "batch-update",
      "delete-subtree",
    ] as const);
    switch (op) {
      case "patient": {
        // The registry allocates the identifier; the patient resource takes it.
        const datasource = pick(DATASOURCES);
        const mrn = `MRN-${step}`;
        const patient = await registry.registerPatient(ALL_GRANTS, datasource, mrn);
        registered.push({ datasource, mrn, patient, studies: [] });
        identifiers.push(patient);
        await attempt(() =>
          createResources(db, caller(), [
            {
              identifier: patient,
              payloadType: "patient",
              parentIdentifier: datasource,
              accessLevel: level(),
              payload: { datasource_id: datasource, birth_year: 1950 + (step % 50) },
            },
          ]),
        );
        break;
      }
      case "study": {
        if (registered.length === 0) break;
        const p = pick(registered);
        const accession = `ACC-${step}`;
        const study = await registry.registerStudy(ALL_GRANTS, p.patient, accession);
        p.studies.push({ accession, study });
        identifiers.push(study);
        await attempt(() =>
          createResources(db, caller(), [
            {
              identifier: study,
              payloadType: "study",
              parentIdentifier: p.patient,
              accessLevel: level(),
              payload: { modality: pick(["CT", "MR"]), accession_number: accession },
            },
          ]),
        );
        break;
      }
      case "leaves": {
        const parent = await target(false);
        const items: NewResource[] = [];
        for (let i = 0, count = 1 + Math.floor(random() * 3); i < count; i++) {
          const id = `n-${n++}`;
          identifiers.push(id);
          const kind = pick(["annotation", "series", "file"] as const);
          const payload =
            kind === "annotation"
              ? { label: pick(["nodule", "lesion", "cyst"]), value: Math.round(random() * 100) / 10 }
              : kind === "series"
                ? { modality: pick(["CT", "MR"]), series_number: step, instance_count: Math.floor(random() * 300) }
                : { path: `s3://bucket/${id}.dcm`, size_bytes: String(1000 + step), content_type: "application/dicom" };
          items.push({
            identifier: id,
            payloadType: kind,
            parentIdentifier: chance(0.85) ? parent : null,
            accessLevel: level(),
            license: pick(["CC-BY", "CC0", null]),
            derivedFrom: chance(0.3) && identifiers.length > 1 ? [pick(identifiers)] : [],
            payload,
          });
        }
        await attempt(() => createResources(db, caller(), items));
        break;
      }
      case "artefact": {
        const id = `art-${n++}`;
        identifiers.push(id);
        const key = pick(ARTEFACT_KEYS);
        const parent = chance(0.5) ? await target(false) : null;
        await attempt(() =>
          createResources(db, caller(), [
            {
              identifier: id,
              payloadType: "artefact",
              parentIdentifier: parent,
              accessLevel: level(),
              payload: {
                ...key,
                commit: `c${step}`,
                status: pick(["succeeded", "succeeded", "failed"]),
                uri: `s3://bucket/${id}`,
                metrics: { dice: step / STEPS },
              },
            },
          ]),
        );
        break;
      }
      case "update": {
        const id = await target(false);
        if (id === null) break;
        const patch: ResourcePatch = chance(0.5)
          ? { license: pick(["CC-BY", "CC0", null]), accessLevel: level() }
          : id.startsWith("n-") || id.startsWith("art-")
            ? { derivedFrom: chance(0.5) ? [pick(identifiers)] : [] }
            : { accessLevel: level() };
        await attempt(() => updateResources(db, caller(), [[id, patch]]));
        break;
      }
      case "batch-update": {
        const ids = [
          ...new Set(
            [await target(false), await target(false), await target(false)].filter((x): x is string => x !== null),
          ),
        ];
        await attempt(() =>
          updateResources(
            db,
            caller(),
            ids.map((id) => [id, { license: pick(["CC-BY", "CC0", null]) }] as const),
          ),
        );
        break;
      }
      case "move-patient": {
        // A patient's datasource changes: the attribution of its whole subtree moves with it.
        if (registered.length === 0) break;
        const p = pick(registered);
        await attempt(() =>
          updateResources(db, caller(), [[p.patient, { payload: { datasource_id: pick(DATASOURCES) } }]]),
        );
        break;
      }
      case "reparent": {
        const id = await target(false);
        if (id === null) break;
        const parent = chance(0.15) ? null : await target(false);
        await attempt(() => updateResources(db, caller(), [[id, { parentIdentifier: parent }]]));
        break;
      }
      case "delete-subtree": {
        // A cascade that tombstones several resources in one commit (and, below, restores them in one).
        const { rows } = await db.query<{ identifier: string }>(
          `SELECT p.identifier FROM resources p WHERE NOT p.is_deleted AND p.payload_type <> 'datasource'
              AND EXISTS (SELECT 1 FROM resources c WHERE c.parent_identifier = p.identifier AND NOT c.is_deleted)
            ORDER BY p.created_at, p.identifier`,
        );
        if (rows.length === 0) break;
        await attempt(() => deleteResources(db, caller(), [pick(rows).identifier], { cascade: true }));
        break;
      }
      case "delete": {
        // The datasources are deleted seldom: a cascade from one empties a third of the store.
        const id = await target(false, chance(0.9) ? DATASOURCES : []);
        if (id === null) break;
        await attempt(() => deleteResources(db, caller(), [id], { cascade: chance(0.7) }));
        break;
      }
      case "restore": {
        const id = await target(true);
        if (id === null) break;
        await attempt(() => restoreResources(db, caller(), [id], { cascade: chance(0.7) }));
        break;
      }
      case "recreate": {
        // A create over a tombstone: a new version 1 life of the same identifier.
        const { rows: tombstoned } = await db.query<{ identifier: string }>(
          "SELECT identifier FROM resources WHERE is_deleted AND identifier LIKE 'n-%' ORDER BY created_at, identifier",
        );
        if (tombstoned.length === 0) break;
        const id = pick(tombstoned).identifier;
        const parent = chance(0.5) ? await target(false) : null;
        await attempt(() =>
          createResources(db, caller(), [
            {
              identifier: id,
              payloadType: "annotation",
              parentIdentifier: parent,
              accessLevel: level(),
              payload: { label: `again-${step}` },
            },
          ]),
        );
        break;
      }
    }
  }
  return { identifiers, registered, written, refused };
}

/** The value of a call, or the error it failed with (a refusal must be the same refusal). */
async function settle<T>(p: Promise<T>): Promise<{ ok: T } | { error: string }> {
  try {
    return { ok: await p };
  } catch (err) {
    return { error: err instanceof Error ? err.message : String(err) };
  }
}

const request = (init: MessageInitShape<typeof QueryRequestSchema>): QueryPlan =>
  planQuery(create(QueryRequestSchema, init));
const value = (v: unknown) => fromJson(ValueSchema, v as never);

/** The queries each instant runs: filters of several kinds, sorts on metadata and payload fields, both orders. */
const PLANS: readonly { name: string; plan: QueryPlan }[] = [
  { name: "everything by created_at", plan: request({}) },
  {
    name: "annotations by label, desc",
    plan: request({
      payloadType: "annotation",
      filters: [{ field: "label", op: "in", value: value(["nodule", "cyst"]) }],
      sortBy: "label",
      sortOrder: "desc",
    }),
  },
  {
    name: "licensed or public, by identifier",
    plan: request({
      filters: [
        {
          any: [
            { field: "license", op: "eq", value: value("CC0") },
            { field: "access_level", op: "eq", value: value("public") },
          ],
        },
      ],
      sortBy: "identifier",
      sortOrder: "asc",
    }),
  },
  {
    name: "below ds-a (indirect), by updated_at",
    plan: request({ parentIdentifier: "ds-a", includeIndirectParents: true, sortBy: "updated_at", sortOrder: "desc" }),
  },
  {
    name: "series by instance_count",
    plan: request({
      payloadType: "series",
      filters: [{ field: "instance_count", op: "gte", value: value(100) }],
      sortBy: "instance_count",
      sortOrder: "asc",
    }),
  },
  {
    name: "derived from something, by version",
    plan: request({
      filters: [
        { field: "version", op: "gt", value: value(1) },
        { field: "parent_identifier", op: "is_not_null" },
      ],
      sortBy: "version",
      sortOrder: "desc",
    }),
  },
];

interface Store {
  readonly db: Db;
  readonly engine: QueryEngine;
  readonly history: ReturnType<typeof createResourceStore>["history"];
}

function storeOf(db: Db): Store {
  const store = createResourceStore(db, { cursorSecret: CURSOR_SECRET });
  return {
    db,
    engine: createQueryEngine(db, { cursorSecret: CURSOR_SECRET }),
    history: (id, grants, options) => store.history(id, grants, options),
  };
}

/** Every page of a query at the instant, with the cursors that joined them. */
async function allPages(s: Store, plan: QueryPlan, grants: Grants, asOf: string, limit: number): Promise<unknown[]> {
  const pages: unknown[] = [];
  let cursor: string | undefined;
  // The first pages and the cursor that would continue them: enough to follow cursors without reading everything at every instant.
  for (let i = 0; i < 4; i++) {
    const page = await s.engine.page(plan, grants, { asOf, limit, ...(cursor !== undefined ? { cursor } : {}) });
    pages.push({ ids: page.resources.map((r) => r.identifier), resources: page.resources, cursor: page.nextCursor });
    cursor = page.nextCursor;
    if (cursor === undefined) break;
  }
  return pages;
}

/** The change feed from the start, page by page, up to the instant. */
async function replay(db: Db, instant: string, limit: number, filter: EventFilter, grants: Grants): Promise<unknown> {
  const events: unknown[] = [];
  const uptos: string[] = [];
  let since: string | null = null;
  for (let i = 0; i < 1000; i++) {
    const page = await readHistoryPage(db, grants, since, limit, filter);
    for (const e of page.events) if (micros(e.at) <= micros(instant)) events.push(e);
    uptos.push(page.upto);
    if (!page.more || micros(page.upto) >= micros(instant)) break;
    since = page.upto;
  }
  return { events, uptos };
}

/** A resource's versions up to the instant, page by page. */
async function historyUntil(s: Store, id: string, grants: Grants, until: string, limit: number): Promise<unknown> {
  const pages: unknown[] = [];
  let cursor: string | undefined;
  for (let i = 0; i < 200; i++) {
    const page = await s.history(id, grants, { until, limit, ...(cursor !== undefined ? { cursor } : {}) });
    pages.push(page);
    cursor = page.nextCursor;
    if (cursor === undefined) break;
  }
  return pages;
}

const FEEDS: readonly EventFilter[] = [
  { includeResources: true },
  { payloadTypes: ["annotation", "study", "patient"] },
  { rootIdentifier: "ds-a", includeResources: true },
  { rootIdentifier: "ds-b" },
];

/**
 * What every read path answers at `instant` (a choice of grants, sample and
 * page size made from `seed`, the same for source and copy).
 */
async function observe(s: Store, built: Built, instant: string, seed: number): Promise<Record<string, unknown>> {
  const random = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const sample = Array.from({ length: 4 }, () => pick(built.identifiers));
  const limit = pick([4, 9, 30]);
  const out: Record<string, unknown> = {};
  const db = s.db;
  // Each instant reads under all grants and under one other (in turn); so do its queries, children and feed.
  const g = GRANTS[1 + (seed % (GRANTS.length - 1))]!;
  for (const { name, grants } of [GRANTS[0]!, g]) {
    out[`read ${name}`] = await readResources(db, grants, [...built.identifiers, "never-written"], { asOf: instant });
  }
  out.read_without_children = await readResources(db, g.grants, sample, { asOf: instant, excludeChildren: true });
  // Half the queries at each instant, in turn: each runs at 25 instants.
  for (const { name, plan } of PLANS.filter((_, i) => i % 2 === seed % 2)) {
    out[`query ${name}`] = await allPages(s, plan, g.grants, instant, limit);
    out[`count ${name}`] = await s.engine.count(plan, g.grants, instant);
    out[`count ${name} all`] = await s.engine.count(plan, ALL_GRANTS, instant);
  }
  out.roots = await settle(listChildren(db, g.grants, { parentIdentifier: null, asOf: instant, withPayloads: true }));
  // Children at a point in the past count descendants through the history: a few per instant (250 over the run).
  for (const id of [DATASOURCES[seed % DATASOURCES.length]!, sample[0]!]) {
    out[`children ${id}`] = await settle(
      listChildren(db, pick(GRANTS).grants, { parentIdentifier: id, asOf: instant, withPayloads: random() < 0.5 }),
    );
  }
  for (const id of sample)
    out[`parents ${id}`] = await settle(listParents(db, pick(GRANTS).grants, id, { asOf: instant }));
  for (const id of sample.slice(0, 2))
    out[`history ${id}`] = await settle(historyUntil(s, id, pick(GRANTS).grants, instant, pick([1, 2, 50])));
  for (const key of ARTEFACT_KEYS)
    out[`artefact ${key.repo} ${key.branch}`] = await latestArtefact(db, g.grants, { ...key, asOf: instant });
  out.events = await replay(db, instant, pick([5, 40, 1000]), FEEDS[seed % FEEDS.length]!, pick(GRANTS).grants);
  for (const { name, grants } of [GRANTS[0]!, g])
    out[`stats ${name}`] = await settle(datasourceStats(db, grants, { asOf: instant }));
  return out;
}

/** The tables no read path shows whole: the registry's rows and keys, the attribution over time, the clock. */
async function tables(db: Db): Promise<unknown> {
  const q = async (sql: string) => (await db.query(sql)).rows;
  return {
    attribution: await q(
      `SELECT identifier, datasource_id, ${ts("tx_from")} AS f, ${ts("tx_to")} AS t FROM resource_attribution ORDER BY identifier, tx_from`,
    ),
    attributionNow: await q("SELECT identifier, datasource_id FROM resources ORDER BY identifier"),
    actors: await q("SELECT identifier, version::text, actor FROM resource_history ORDER BY identifier, version"),
    patients: await q(
      `SELECT identifier, datasource_id, encode(uid_hash, 'hex') AS h, key_chain, ${ts("registered_at")} AS r FROM registry_patients ORDER BY identifier`,
    ),
    studies: await q(
      `SELECT identifier, patient_identifier, encode(uid_hash, 'hex') AS h, key_chain, ${ts("registered_at")} AS r FROM registry_studies ORDER BY identifier`,
    ),
    keys: await q("SELECT key_id, encode(fingerprint, 'hex') AS f FROM registry_keys ORDER BY key_id"),
    chains: await q("SELECT chain, key_ids FROM registry_key_chains ORDER BY chain"),
    clock: await q(`SELECT ${ts("last")} AS last FROM clock`),
  };
}

/** What the registry answers for every uid it registered (with the key the service starts with). */
async function resolutions(db: Db, built: Built): Promise<unknown[]> {
  await loadRegistryKeys({ configured, db, dataDir: undefined });
  const registry = createRegistry({ db, keys: registryKeys });
  const out: unknown[] = [];
  for (const r of built.registered) {
    out.push([r.datasource, r.mrn, await settle(registry.resolvePatient(ALL_GRANTS, r.datasource, r.mrn))]);
    out.push([r.datasource, r.mrn, "ds-a only", await settle(registry.resolvePatient(ONLY_A, r.datasource, r.mrn))]);
    for (const s of r.studies)
      out.push([r.patient, s.accession, await settle(registry.resolveStudy(ALL_GRANTS, r.patient, s.accession))]);
  }
  return out;
}

const stores = pgliteStores("rs-dump-eq-");
const freshPglite = stores.open;
const dumpOf = (db: Db): Promise<Buffer> => dumpToBuffer(db, { batchSize: 50 });

describe(`dump and restore answer every read path as the source (seed ${SEED})`, () => {
  let source: Db;
  let built: Built;
  let dump: Buffer;
  let instants: string[];
  let pg: TestDatabase | undefined;

  beforeAll(async () => {
    source = await freshPglite();
    await loadRegistryKeys({ configured, db: source, dataDir: undefined });
    const t0 = Date.now();
    built = await buildHistory(source, SEED);
    const t1 = Date.now();
    dump = await dumpOf(source);
    console.log(
      `history: ${built.written} writes (${built.refused} refused) in ${t1 - t0} ms; dump ${dump.length} bytes in ${Date.now() - t1} ms`,
    );
    // 50 instants: some exactly at a commit, some between two, one before the first, and now.
    const { rows } = await source.query<{ at: string }>(
      `SELECT DISTINCT ${ts("tx_from")} AS at FROM resource_history ORDER BY 1`,
    );
    const stamps = rows.map((r) => r.at);
    const random = prng(SEED + 1);
    const first = micros(stamps[0]!);
    const last = micros(stamps[stamps.length - 1]!);
    const picked = new Set<string>([fromMicros(first - 1n), fromMicros(last + 1000n)]);
    while (picked.size < INSTANTS) {
      picked.add(
        random() < 0.5
          ? stamps[Math.floor(random() * stamps.length)]!
          : fromMicros(first + BigInt(Math.floor(random() * Number(last - first)))),
      );
    }
    instants = [...picked].sort();
    if (await postgresReachable()) pg = await createTestDatabase();
    else if (REQUIRE_POSTGRES) throw new Error("PostgreSQL is required (REQUIRE_POSTGRES=1) but not reachable");
  });
  afterAll(async () => {
    await source?.close();
    await pg?.drop();
    await stores.removeAll();
  });

  it("the history used every verb, several actors, the registry and artefacts", async () => {
    const { rows } = await source.query<{ actors: string; types: string; reparented: boolean; recreated: boolean }>(
      `SELECT (SELECT string_agg(DISTINCT actor, ',' ORDER BY actor) FROM resource_history) AS actors,
              (SELECT string_agg(DISTINCT payload_type, ',' ORDER BY payload_type) FROM resource_history) AS types,
              EXISTS (SELECT 1 FROM resource_history a JOIN resource_history b ON b.identifier = a.identifier AND b.version = a.version + 1
                       WHERE a.parent_identifier IS DISTINCT FROM b.parent_identifier) AS reparented,
              EXISTS (SELECT 1 FROM resource_history a JOIN resource_history b ON b.identifier = a.identifier AND b.version = a.version + 1
                       WHERE a.is_deleted AND NOT b.is_deleted AND b.created_at = b.tx_from) AS recreated`,
    );
    const row = rows[0]!;
    expect(row.actors).toBe("alice,bob,carol@ds-a");
    expect(row.types).toBe("annotation,artefact,datasource,file,patient,series,study");
    expect(row.reparented).toBe(true);
    expect(row.recreated).toBe(true);
    const feed = await replay(source, instants[instants.length - 1]!, 1000, {}, ALL_GRANTS);
    const kinds = new Set((feed as { events: { kind: string }[] }).events.map((e) => e.kind));
    expect(kinds).toEqual(new Set(["created", "updated", "deleted", "restored"]));
    expect(built.registered.length).toBeGreaterThan(5);
    expect(built.registered.some((r) => r.studies.length > 0)).toBe(true);
    expect(built.refused).toBeGreaterThan(0);
    expect(built.written).toBeGreaterThan(80);
    // Cascades: one commit tombstoned several resources.
    const { rows: cascades } = await source.query<{ n: string }>(
      "SELECT count(*) AS n FROM (SELECT tx_from FROM resource_history WHERE is_deleted AND version > 1 GROUP BY tx_from HAVING count(*) > 1) c",
    );
    expect(Number(cascades[0]!.n)).toBeGreaterThan(0);
  });

  const targets: { name: string; open: () => Promise<Db | undefined> }[] = [
    {
      name: "PostgreSQL",
      open: async () => {
        if (pg === undefined) return undefined;
        const db = await openDatabase({ databaseUrl: pg.url, poolSize: 2 });
        await migrate(db);
        return db;
      },
    },
    { name: "PGlite", open: freshPglite },
  ];

  const observed: Record<string, unknown>[] = [];
  it.each(targets)(
    "restored into $name, at 50 instants every read path answers as on the source",
    async ({ name, open }) => {
      const target = await open();
      if (target === undefined) return;
      try {
        const started = Date.now();
        await restoreDump(target, Readable.from([dump]), { batchSize: 64 });
        const restored = Date.now();
        const [s, c] = [storeOf(source), storeOf(target)];
        expect(await tables(target)).toEqual(await tables(source));
        for (const [i, instant] of instants.entries()) {
          // The source's answers are read once, for both targets.
          const expected = (observed[i] ??= await observe(s, built, instant, SEED * 100 + i));
          const actual = await observe(c, built, instant, SEED * 100 + i);
          for (const key of Object.keys(expected)) expect(actual[key], `${key} at ${instant}`).toEqual(expected[key]);
        }
        // Now (no as_of): the current tables, the stored tree counts, the statistics.
        for (const { grants } of GRANTS) {
          expect(await readResources(target, grants, built.identifiers)).toEqual(
            await readResources(source, grants, built.identifiers),
          );
          expect(await settle(listChildren(target, grants, { parentIdentifier: null }))).toEqual(
            await settle(listChildren(source, grants, { parentIdentifier: null })),
          );
          expect(await datasourceStats(target, grants)).toEqual(await datasourceStats(source, grants));
          for (const { plan } of PLANS)
            expect(await c.engine.count(plan, grants, undefined)).toEqual(
              await s.engine.count(plan, grants, undefined),
            );
        }
        expect(await resolutions(target, built)).toEqual(await resolutions(source, built));
        console.log(`${name}: restored in ${restored - started} ms, compared in ${Date.now() - restored} ms`);
      } finally {
        await target.close();
      }
    },
    300_000,
  );
});
