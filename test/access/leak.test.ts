// The leak suite (docs/contract/18-access.md): random histories of
// writes (patients moved between datasources, studies re-parented across
// them, levels raised and lowered, cascading deletes and restores) are
// replayed into the service and into a model; then, at read points drawn
// from the history, every read path answers each restricted caller exactly
// what the unrestricted reader answers, filtered by the rules the model
// computes. A path that leaks (or hides too much) fails here.
//
// The model covers too: writers at `internal` of one, two and every
// datasource; creates over tombstones; files naming another resource's
// object; the registry's studies with resources of their own; register and
// upload roots for every writer; and scripted scenarios of each finding
// (`scenarios`). Notes: with each of these four checks removed from
// the service in turn (the move by clearance, a tombstone replaced rather
// than moved, object claims, a study's own resource in resolve), this suite
// failed (pglite, two runs, LEAK_RUNS default): at the scenario move (200,
// not 403), at a presign of a claimed object (200, not 404), at the
// scenario create over a tombstone (403, not 200), and at resolving the
// restricted study as the public reader (200, not 400).
import fc from "fast-check";
import { parquetReadObjects } from "hyparquet";
import { describe, expect, it } from "vitest";
import { ALL_GRANTS, type Grants } from "../../src/access/index.js";
import { startTestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable } from "../support/postgres.js";
import { writeFixture } from "../storage/parquet-fixture.js";
import {
  apply,
  applyAs,
  attribution,
  countKey,
  current,
  DATASOURCES,
  LEVELS,
  newModel,
  opFrom,
  restRequest,
  versionVisible,
  visible,
  type Model,
  type Node,
  type Op,
  type State,
  writeOutcome,
} from "./leak-model.js";

const pgOk = await postgresReachable();

/** The callers of the suite: the three of the issue, and the unrestricted reader whose answers the model filters. */
const CALLERS: Record<string, { token: string; grants: Grants }> = {
  "one datasource, internal": { token: "tok-a", grants: { datasources: new Set(["ds-1"]), clearance: "internal" } },
  "two datasources, restricted": {
    token: "tok-b",
    grants: { datasources: new Set(["ds-1", "ds-2"]), clearance: "restricted" },
  },
  "every datasource, public": { token: "tok-c", grants: { datasources: "all", clearance: "public" } },
};
const TOKENS = [
  "tok-w=write,actor:writer",
  "tok-full=read",
  "tok-a=read,datasource:ds-1,clearance:internal",
  "tok-b=read,datasource:ds-1,datasource:ds-2,clearance:restricted",
  "tok-c=read,datasource:*,clearance:public",
  "tok-nw=write,actor:narrow,datasource:ds-1,clearance:internal",
  "tok-nw2=write,actor:narrow-two,datasource:ds-1,datasource:ds-2,clearance:internal",
  "tok-nwall=write,actor:narrow-every,clearance:internal",
].join(";");

/**
 * The narrow writers, one of each grant shape below everything (docs/contract/18-access.md):
 * one datasource, two datasources and every datasource, each at `internal`.
 * Half of the writes of a history (every verb: create, create over a
 * tombstone, level, move, patient-ds, delete, restore) are sent with one of
 * their tokens, half of those aimed within its grants (opFrom's Aim), the
 * others anywhere.
 */
const NARROW: Grants = { datasources: new Set(["ds-1"]), clearance: "internal" };
const WRITERS: readonly { token: string; grants: Grants; aim: string; name: string }[] = [
  { token: "tok-nw", grants: NARROW, aim: "ds-1", name: "narrow" },
  {
    token: "tok-nw2",
    grants: { datasources: new Set(["ds-1", "ds-2"]), clearance: "internal" },
    aim: "ds-2",
    name: "two datasources, internal",
  },
  {
    token: "tok-nwall",
    grants: { datasources: "all", clearance: "internal" },
    aim: "ds-3",
    name: "every datasource, internal",
  },
];

type Json = any;

function caller(base: () => string, token: string) {
  const call = async (
    method: "GET" | "POST",
    path: string,
    body?: unknown,
  ): Promise<{ status: number; json: Json; bytes?: Uint8Array }> => {
    const res = await fetch(base() + path, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (res.headers.get("content-type")?.startsWith("application/octet-stream"))
      return { status: res.status, json: undefined, bytes: new Uint8Array(await res.arrayBuffer()) };
    return { status: res.status, json: await res.json() };
  };
  return { get: (p: string) => call("GET", p), post: (p: string, b: unknown) => call("POST", p, b) };
}

/** A read point strictly between two commits (see the comment in `replay`). */
function stampNow(): string {
  const ms = Date.now();
  return new Date(ms).toISOString().replace("Z", "999Z");
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Replayed {
  model: Model;
  /** points[i]: a read point at which the state is model.states[i]. */
  points: string[];
}

/**
 * Sends the ops one by one (a third as the narrow writer, the rest as the
 * unrestricted one), checks each answer against the model, and records a
 * read point after each op that wrote: taken after the answer (so the commit is at or before
 * it) and followed by a pause longer than the clock's resolution (PGlite
 * ticks in milliseconds), so the next commit is after it.
 */
async function replay(
  writer: ReturnType<typeof caller>,
  narrowWriters: readonly ReturnType<typeof caller>[],
  draws: number[][],
): Promise<Replayed> {
  const model = newModel();
  const points: string[] = [];
  await sleep(2);
  await markPoint(points);
  const counter = { n: 0 };
  // The datasources, and a spine below each (a patient of the next datasource, a study, a series, at shifted levels), so that leaves come early.
  const seed: Op[] = [
    ...DATASOURCES.map((ds, i) => ({
      kind: "create" as const,
      node: { id: ds, type: "datasource" as const, parent: null, level: LEVELS[i % 3] ?? "public" },
    })),
    ...DATASOURCES.flatMap((ds, i): Op[] => [
      {
        kind: "create",
        node: {
          id: `pat-s${i}`,
          type: "patient",
          parent: ds,
          level: LEVELS[i % 3] ?? "public",
          datasourceId: DATASOURCES[(i + 1) % 3],
        },
      },
      {
        kind: "create",
        node: { id: `stu-s${i}`, type: "study", parent: `pat-s${i}`, level: LEVELS[(i + 1) % 3] ?? "public" },
      },
      {
        kind: "create",
        node: { id: `ser-s${i}`, type: "series", parent: `stu-s${i}`, level: LEVELS[(i + 2) % 3] ?? "public" },
      },
    ]),
  ];
  for (const op of seed) await writeUnrestricted(writer, model, points, op);
  await scenarios(writer, narrowWriters, model, points);
  for (const draw of draws) {
    const w = Math.floor((draw[0] ?? 0) / 15) % 6;
    const narrow = WRITERS[w];
    const op = opFrom(
      current(model),
      counter,
      draw,
      narrow ? { grants: narrow.grants, datasource: narrow.aim } : undefined,
    );
    if (op === undefined) continue;
    if (
      op.kind === "create" &&
      (op.node.type === "file" || op.node.type === "artefact") &&
      op.node.object === undefined
    )
      op.node.object = await upload(writer);
    const { path, body } = restRequest(op);
    const as = narrow
      ? { who: narrowWriters[w] as ReturnType<typeof caller>, grants: narrow.grants, name: narrow.name }
      : { who: writer, grants: ALL_GRANTS, name: "unrestricted" };
    // The model says what the op does: refused with nothing written (later reads compare every resource), or applied as the writer's grants allow, with the count it answers.
    const expected = writeOutcome(current(model), as.grants, op);
    const res = await as.who.post(path, body);
    const ctx = `${as.name} ${JSON.stringify(op)} -> ${JSON.stringify(res.json)}`;
    if (expected.status !== 200) {
      expect([res.status, res.json?.reason], ctx).toEqual([expected.status, expected.reason]);
      continue;
    }
    expect(res.status, ctx).toBe(200);
    const n = applyAs(model, as.grants, op);
    expect(res.json, ctx).toEqual({ [countKey(op)]: n });
    await markPoint(points);
  }
  return { model, points };
}

/**
 * The access edges (test/access/edges.test.ts), in every history (random draws reach them only now and
 * then): each op's answer is the model's, and the reads afterwards check
 * what it left. With one check of the service removed the suite fails
 * (each tried on this suite, pglite, two runs; see the notes at the top):
 * - the move by clearance (src/store/attribution.ts, `m.rank > clearance`):
 *   the writer of every datasource at `internal` moves stu-s0, whose series
 *   ser-s0 is `restricted`, to another datasource and to none: 200, not 403;
 * - the tombstone's own datasource (attribution.ts, `m.self && created`):
 *   the narrow writer's create over stu-t, a tombstone of ds-3: 403, not 200;
 * - object claims (src/store/objects.ts, `hidden`): fil-y, the narrow
 *   writer's `internal` file naming the object of the `restricted` fil-x,
 *   lets the `internal` reader of ds-1 download it: 200, not 404;
 * - a study's own resource in resolve (src/store/registry.ts, `own`): the
 *   `restricted` study registered second resolves for the public reader.
 */
async function scenarios(
  writer: ReturnType<typeof caller>,
  narrowWriters: readonly ReturnType<typeof caller>[],
  model: Model,
  points: string[],
): Promise<void> {
  const [narrow, , every] = WRITERS;
  const send = async (who: ReturnType<typeof caller>, grants: Grants, op: Op) => {
    const expected = writeOutcome(current(model), grants, op);
    const { path, body } = restRequest(op);
    const res = await who.post(path, body);
    const ctx = `scenario ${JSON.stringify(op)} -> ${JSON.stringify(res.json)}`;
    if (expected.status !== 200) {
      expect([res.status, res.json?.reason], ctx).toEqual([expected.status, expected.reason]);
      return;
    }
    expect(res.status, ctx).toBe(200);
    expect(res.json, ctx).toEqual({ [countKey(op)]: applyAs(model, grants, op) });
    await markPoint(points);
  };
  const [nw, , nwall] = narrowWriters as [
    ReturnType<typeof caller>,
    ReturnType<typeof caller>,
    ReturnType<typeof caller>,
  ];
  const full = { who: writer, grants: ALL_GRANTS };
  const everyW = { who: nwall, grants: (every as (typeof WRITERS)[number]).grants };
  const narrowW = { who: nw, grants: (narrow as (typeof WRITERS)[number]).grants };
  const plan: [typeof full, Op][] = [
    // Moves by clearance: stu-s0 (internal, ds-2) holds ser-s0 (restricted).
    [everyW, { kind: "move", id: "stu-s0", parent: "pat-s1" }],
    [everyW, { kind: "move", id: "stu-s0", parent: "ds-1" }],
    // A patient and a spine of ds-1 that the narrow writer sees.
    [
      full,
      {
        kind: "create",
        node: { id: "pat-x", type: "patient", parent: "ds-1", level: "internal", datasourceId: "ds-1" },
      },
    ],
    [full, { kind: "create", node: { id: "stu-x", type: "study", parent: "pat-x", level: "internal" } }],
    [full, { kind: "create", node: { id: "ser-x", type: "series", parent: "stu-x", level: "internal" } }],
    // A tombstone of ds-3 (under pat-s1), created over by the narrow writer of ds-1.
    [full, { kind: "create", node: { id: "stu-t", type: "study", parent: "pat-s1", level: "internal" } }],
    [full, { kind: "delete", id: "stu-t" }],
    [narrowW, { kind: "create", over: true, node: { id: "stu-t", type: "study", parent: "pat-x", level: "internal" } }],
  ];
  for (const [w, op] of plan) await send(w.who, w.grants, op);
  // A restricted file of ds-1 and the narrow writer's internal file naming its object.
  const object = await upload(writer);
  await send(writer, ALL_GRANTS, {
    kind: "create",
    node: { id: "fil-x", type: "file", parent: "ser-x", level: "restricted", object },
  });
  await send(nw, narrowW.grants, {
    kind: "create",
    node: { id: "fil-y", type: "file", parent: "ser-x", level: "internal", object },
  });
}

/** The read point after a write: taken after the answer, then a pause longer than the clock's resolution. */
async function markPoint(points: string[]): Promise<void> {
  points.push(stampNow());
  await sleep(2);
}

/** Sends an op as the unrestricted writer, which must take it; applies it to the model and marks the read point after it. */
async function writeUnrestricted(
  writer: ReturnType<typeof caller>,
  model: Model,
  points: string[],
  op: Op,
): Promise<void> {
  const { path, body } = restRequest(op);
  const res = await writer.post(path, body);
  expect(res.status, JSON.stringify(res.json)).toBe(200);
  apply(model, op);
  await markPoint(points);
}

const PARQUET = writeFixture(4, 4).bytes;

/** A parquet object of its own for a file's path or an artefact's uri, so that /s3/parquet has something to answer 200 with. */
async function upload(writer: ReturnType<typeof caller>): Promise<string> {
  const up = await writer.post("/s3/presign", { direction: "upload", group: "leak", filename: "o.parquet" });
  expect(up.status, JSON.stringify(up.json)).toBe(200);
  const put = await fetch(up.json.url as string, { method: "PUT", body: PARQUET });
  expect(put.status).toBe(200);
  return up.json.path as string;
}

const drawArb = fc.array(fc.array(fc.nat({ max: 1000 }), { minLength: 5, maxLength: 5 }), {
  minLength: 30,
  maxLength: 60,
});

function suite(kind: "pglite" | "postgres") {
  it("every read path answers each caller the unrestricted answer filtered by the rules", async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        drawArb,
        fc.array(fc.nat(), { minLength: 3, maxLength: 3 }),
        fc.array(fc.nat(), { minLength: 2, maxLength: 4 }),
        async (draws, pointDraws, regDraws) => {
          // Each run on a store of its own: the datasources' identifiers are the grants' names.
          run += 1;
          const testDb = kind === "postgres" ? await createTestDatabase() : undefined;
          const server = await startTestServer({
            API_TOKENS: TOKENS,
            EVENTS_HEARTBEAT_MS: "200",
            ...(testDb ? { DATABASE_URL: testDb.url } : {}),
          });
          try {
            const base = () => server.url;
            const full = caller(base, "tok-full");
            const { model, points } = await replay(
              caller(base, "tok-w"),
              WRITERS.map((w) => caller(base, w.token)),
              draws,
            );
            const registered = await register(caller(base, "tok-w"), model, points, regDraws);
            const now = current(model);
            // Read points: now, and a few drawn from the history.
            const picks = [points.length - 1, ...pointDraws.map((d) => d % points.length)];
            for (const i of picks) {
              const then = model.states[i] as State;
              const asOf = points[i] as string;
              const ids = [...now.keys()];
              const fullRead = await full.post("/resources/read", { identifiers: ids, as_of: asOf });
              expect(fullRead.status).toBe(200);
              // The model is right about the unrestricted answer (else the comparisons below mean nothing).
              expect((fullRead.json as Json[]).map((r) => r.identifier).sort()).toEqual(
                ids.filter((id) => then.get(id)?.deleted === false).sort(),
              );
              for (const [name, { token, grants }] of Object.entries(CALLERS)) {
                const who = caller(base, token);
                const sees = (id: string) => visible(grants, then, now, id);
                const ctx = `${kind} run ${run}, ${name}, point ${i}/${points.length - 1}`;
                await checkRead(who, fullRead.json as Json[], ids, asOf, sees, ctx);
                await checkQueries(who, full, asOf, points[Math.floor(points.length / 2)] as string, sees, then, ctx);
                // An ancestor in a /parents chain may be tombstoned (the chain follows parent_identifier): it shows when its version may be seen.
                const seesAncestor = (id: string) => versionVisible(grants, then, now, id);
                await checkLineage(who, full, asOf, sees, seesAncestor, then, ctx);
                await checkLatest(who, full, asOf, sees, then, ctx);
              }
              await checkCursorReplay(base, asOf, `${kind} run ${run}, point ${i}/${points.length - 1}`);
            }
            for (const [name, { token, grants }] of Object.entries(CALLERS)) {
              const who = caller(base, token);
              const ctx = `${kind} run ${run}, ${name}, now`;
              await checkStats(who, full, grants, now, registered, ctx);
              await checkStorage(who, full, grants, now, ctx);
              await checkRegistry(who, grants, now, registered, ctx);
              await checkHistory(who, full, grants, model, points, ctx);
              await checkEvents(server.url, token, grants, model, points, ctx);
            }
            for (const w of WRITERS) {
              const ctx = `${kind} run ${run}, writer ${w.name}`;
              await checkRegister(caller(base, w.token), w.grants, now, registered, ctx);
              await checkUploadRoot(caller(base, "tok-w"), caller(base, w.token), ctx);
            }
          } finally {
            await server.close();
            await testDb?.drop();
          }
        },
      ),
      {
        numRuns: Number(process.env.LEAK_RUNS ?? 2),
        endOnFailure: true,
        // A failure's seed and path (printed with it) replay its histories: LEAK_SEED=... LEAK_PATH=... npx vitest run test/access/leak.test.ts
        ...(process.env.LEAK_SEED ? { seed: Number(process.env.LEAK_SEED), path: process.env.LEAK_PATH } : {}),
      },
    );
    // Two whole histories, each read on every path by four callers: minutes on a loaded machine.
  }, 900_000);
}

async function checkRead(
  who: ReturnType<typeof caller>,
  fullAnswer: Json[],
  ids: string[],
  asOf: string,
  sees: (id: string) => boolean,
  ctx: string,
) {
  const res = await who.post("/resources/read", { identifiers: ids, as_of: asOf });
  expect(res.status, ctx).toBe(200);
  const expected = fullAnswer
    .filter((r) => sees(r.identifier))
    .map((r) => ({ ...r, children: (r.children as string[]).filter(sees) }));
  expect(res.json, `read, ${ctx}`).toEqual(expected);
}

async function checkQueries(
  who: ReturnType<typeof caller>,
  full: ReturnType<typeof caller>,
  asOf: string,
  stamp: string,
  sees: (id: string) => boolean,
  then: State,
  ctx: string,
) {
  const patients = [...then.values()].filter((n) => n.type === "patient" && !n.deleted).map((n) => n.id);
  const bodies: Json[] = [
    {},
    { payload_type: "study" },
    { payload_type: "patient", filters: [{ field: "datasource_id", op: "in", value: ["ds-1", "ds-3"] }] },
    {
      filters: [
        {
          any: [
            { field: "access_level", op: "eq", value: "restricted" },
            { field: "payload_type", op: "eq", value: "file" },
          ],
        },
      ],
    },
    { filters: [{ field: "identifier", op: "starts_with", value: "s" }] },
    { filters: [{ field: "parent_identifier", op: "is_not_null" }] },
    // Every other filter op of section 4: eq ne lt lte gt gte not_in contains is_null.
    { filters: [{ field: "access_level", op: "eq", value: "internal" }] },
    { filters: [{ field: "access_level", op: "ne", value: "public" }] },
    { filters: [{ field: "identifier", op: "lt", value: "ser" }] },
    { filters: [{ field: "identifier", op: "gt", value: "pat" }] },
    { filters: [{ field: "created_at", op: "lte", value: stamp }] },
    { filters: [{ field: "created_at", op: "gte", value: stamp }] },
    { filters: [{ field: "payload_type", op: "not_in", value: ["study", "series"] }] },
    { filters: [{ field: "identifier", op: "contains", value: "-1" }] },
    { filters: [{ field: "parent_identifier", op: "is_null" }] },
    // A payload field of a type.
    { payload_type: "artefact", filters: [{ field: "status", op: "eq", value: "succeeded" }] },
    ...patients
      .slice(0, 2)
      .flatMap((p) => [{ parent_identifier: p }, { parent_identifier: p, include_indirect_parents: true }]),
    // Below a datasource node: patients of any datasource hang there.
    { parent_identifier: DATASOURCES[0], include_indirect_parents: true },
    { identifiers: [...then.keys()].slice(0, 7) },
  ];
  for (const q of bodies) {
    const body = { ...q, as_of: asOf, sort_by: "created_at", sort_order: "asc", limit: 10000 };
    const f = await full.post("/query", body);
    expect(f.status, `${JSON.stringify(q)} ${JSON.stringify(f.json)}`).toBe(200);
    const expected = (f.json.results as Json[]).filter((r) => sees(r.identifier));
    const r = await who.post("/query", body);
    expect(r.status, ctx).toBe(200);
    expect(r.json.results, `query ${JSON.stringify(q)}, ${ctx}`).toEqual(expected);
    const c = await who.post("/query/count", { ...q, as_of: asOf });
    expect(c.json, `count ${JSON.stringify(q)}, ${ctx}`).toEqual({ count: expected.length });
    // Cursor pages: the pages together are the whole answer.
    const pages: Json[] = [];
    let cursor: string | null = null;
    for (let n = 0; n < 50; n++) {
      const page: { status: number; json: Json } = await who.post("/query", {
        ...q,
        sort_by: "created_at",
        sort_order: "asc",
        limit: 3,
        ...(cursor === null ? { as_of: asOf } : { cursor }),
      });
      expect(page.status, `page ${n} ${JSON.stringify(page.json)}`).toBe(200);
      pages.push(...(page.json.results as Json[]));
      cursor = page.json.next_cursor as string | null;
      if (cursor === null) break;
    }
    expect(
      pages.map((p) => p.identifier),
      `pages ${JSON.stringify(q)}, ${ctx}`,
    ).toEqual(expected.map((e) => e.identifier));
  }
  // The parquet export of a query holds the same rows.
  const exp = await who.post("/query/parquet", { as_of: asOf, sort_by: "created_at", sort_order: "asc" });
  expect(exp.status, ctx).toBe(200);
  const bytes = exp.bytes as Uint8Array;
  const rows = (await parquetReadObjects({
    file: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer,
    columns: ["identifier"],
  })) as { identifier: string }[];
  const f = await full.post("/query", { as_of: asOf, sort_by: "created_at", sort_order: "asc" });
  expect(
    rows.map((r) => r.identifier),
    `parquet, ${ctx}`,
  ).toEqual((f.json.results as Json[]).map((r) => r.identifier as string).filter(sees));
}

async function checkLineage(
  who: ReturnType<typeof caller>,
  full: ReturnType<typeof caller>,
  asOf: string,
  sees: (id: string) => boolean,
  seesAncestor: (id: string) => boolean,
  then: State,
  ctx: string,
) {
  const enc = encodeURIComponent(asOf);
  // Every node's children and the roots: the visible ones, with counts of visible children and descendants only.
  const parents = [undefined, ...[...then.values()].filter((n) => !n.deleted).map((n) => n.id)];
  for (const p of parents) {
    const q = `/v1/children?as_of=${enc}${p === undefined ? "" : `&parent_identifier=${encodeURIComponent(p)}`}`;
    const f = await full.get(q);
    const r = await who.get(q);
    if (p !== undefined && !sees(p)) {
      expect(r.status, `children of hidden ${p}, ${ctx}`).toBe(404);
      continue;
    }
    expect(f.status).toBe(200);
    expect(r.status, `children of ${p ?? "(roots)"}, ${ctx}: ${JSON.stringify(r.json)}`).toBe(200);
    const expectedNodes = (f.json as Json[])
      .filter((n) => sees(n.identifier))
      .map((n) => ({
        ...n,
        child_count: childrenOf(then, n.identifier).filter(sees).length,
        descendant_count: descendantsOf(then, n.identifier).filter(sees).length,
      }));
    expect(r.json, `children of ${p ?? "(roots)"}, ${ctx}`).toEqual(expectedNodes);
  }
  for (const n of [...then.values()].filter((x) => !x.deleted)) {
    const r = await who.get(`/parents/${encodeURIComponent(n.id)}?as_of=${enc}`);
    if (!sees(n.id)) {
      expect(r.status, `parents of hidden ${n.id}, ${ctx}`).toBe(404);
      continue;
    }
    const f = await full.get(`/parents/${encodeURIComponent(n.id)}?as_of=${enc}`);
    const chain = f.json as string[];
    // The chain stops before the first ancestor the caller may not see; a tombstoned one is in it.
    const stop = chain.findIndex((a) => !seesAncestor(a));
    expect(r.json, `parents of ${n.id}, ${ctx}`).toEqual(stop === -1 ? chain : chain.slice(0, stop));
  }
}

/** Active immediate children in the model (the counts of /children are of active resources). */
function childrenOf(state: State, id: string): string[] {
  return [...state.values()].filter((n) => n.parent === id && !n.deleted).map((n) => n.id);
}

function descendantsOf(state: State, id: string): string[] {
  const out: string[] = [];
  for (const c of childrenOf(state, id)) out.push(c, ...descendantsOf(state, c));
  return out;
}

const CURSOR_TOKENS = ["tok-full", "tok-a", "tok-b", "tok-c"];

/**
 * A cursor taken by one caller and replayed by another (the unrestricted
 * reader's included) is refused as one of another query (cursors are bound to
 * the grants that took them), while the caller that took it may go on.
 */
async function checkCursorReplay(base: () => string, asOf: string, ctx: string) {
  for (const taker of CURSOR_TOKENS) {
    const first = await caller(base, taker).post("/query", {
      as_of: asOf,
      limit: 1,
      sort_by: "created_at",
      sort_order: "asc",
    });
    expect(first.status, ctx).toBe(200);
    const cursor = first.json.next_cursor as string | null;
    if (cursor === null) continue;
    const sort = { sort_by: "created_at", sort_order: "asc" };
    // The same query (a cursor of another query is 400 anyway): only the grants differ.
    const own = await caller(base, taker).post("/query", { ...sort, cursor, limit: 1 });
    expect(own.status, `${taker} goes on with its own cursor, ${ctx}`).toBe(200);
    for (const other of CURSOR_TOKENS.filter((t) => t !== taker)) {
      const who = caller(base, other);
      for (const path of ["/query", "/query/parquet"]) {
        const replayed = await who.post(path, { ...sort, cursor, limit: 10000 });
        expect(replayed.status, `${other} replays ${taker}'s cursor on ${path}, ${ctx}`).toBe(400);
        expect([replayed.json?.code, replayed.json?.reason], ctx).toEqual(["invalid_argument", "INVALID_CURSOR"]);
      }
    }
  }
}

/** `/artefacts/latest`: the last created succeeded artefact of a repository path among those the caller may see; 404 when none. */
async function checkLatest(
  who: ReturnType<typeof caller>,
  full: ReturnType<typeof caller>,
  asOf: string,
  sees: (id: string) => boolean,
  then: State,
  ctx: string,
) {
  for (const path of ["m0", "m1"]) {
    const q = `/artefacts/latest?repo=r&branch=main&path=${path}&as_of=${encodeURIComponent(asOf)}`;
    const candidates = [...then.values()]
      .filter(
        (n) => n.type === "artefact" && !n.deleted && n.artefact?.path === path && n.artefact.status === "succeeded",
      )
      .sort((a, b) => a.seq - b.seq);
    const f = await full.get(q);
    // The model is right about the unrestricted answer.
    const last = candidates[candidates.length - 1];
    expect([f.status, f.json?.identifier], `latest ${path} (unrestricted), ${ctx}`).toEqual(
      last === undefined ? [404, undefined] : [200, last.id],
    );
    const mine = candidates.filter((n) => sees(n.id)).pop();
    const r = await who.get(q);
    if (mine === undefined) {
      expect(r.status, `latest ${path}, ${ctx}: ${JSON.stringify(r.json)}`).toBe(404);
      continue;
    }
    expect(r.status, `latest ${path}, ${ctx}`).toBe(200);
    expect(r.json.identifier, `latest ${path}, ${ctx}`).toBe(mine.id);
    if (mine.id === last?.id) expect(r.json, `latest ${path}, ${ctx}`).toEqual(f.json);
  }
}

interface Registered {
  datasourceId: string;
  uid: string;
  patient: string;
  accession: string;
  study: string;
}

/**
 * Registers a patient and a study in each drawn datasource (ds-4 has no
 * resources: only the registry knows it); every other registered patient is
 * then created as a resource with its identifier, at a drawn level, so the
 * registry's "patient resource the caller may not see" rule is met too.
 */
async function register(
  writer: ReturnType<typeof caller>,
  model: Model,
  points: string[],
  draws: number[],
): Promise<Registered[]> {
  const out: Registered[] = [];
  for (const [i, d] of draws.entries()) {
    const datasourceId = ["ds-1", "ds-2", "ds-3", "ds-4"][d % 4] as string;
    const uid = `mrn-${i}`;
    const p = await writer.post("/patients/register", { datasource_id: datasourceId, external_uid: uid });
    expect(p.status, JSON.stringify(p.json)).toBe(200);
    const accession = `acc-${i}`;
    const st = await writer.post("/studies/register", {
      patient_identifier: p.json.identifier,
      external_uid: accession,
    });
    expect(st.status, JSON.stringify(st.json)).toBe(200);
    out.push({
      datasourceId,
      uid,
      patient: p.json.identifier as string,
      accession,
      study: st.json.identifier as string,
    });
    if (i % 2 === 1) {
      // The second: a public patient with a restricted study, so that the study's own resource decides.
      const patientLevel = i === 1 ? "public" : (LEVELS[Math.floor(d / 4) % 3] ?? "public");
      const op = {
        kind: "create" as const,
        node: {
          id: p.json.identifier as string,
          type: "patient" as const,
          parent: null,
          level: patientLevel,
          datasourceId,
        },
      };
      await writeUnrestricted(writer, model, points, op);
      // Its study too, at another drawn level: a study whose own resource the caller may not see resolves as not registered.
      const study = {
        kind: "create" as const,
        node: {
          id: st.json.identifier as string,
          type: "study" as const,
          parent: op.node.id,
          level: i === 1 ? "restricted" : (LEVELS[Math.floor(d / 12) % 3] ?? "public"),
        },
      };
      await writeUnrestricted(writer, model, points, study);
    }
  }
  return out;
}

/** Resolving: a patient or study of a datasource outside the grants, or of a patient resource the caller may not see, answers exactly as an unregistered one. */
async function checkRegistry(
  who: ReturnType<typeof caller>,
  grants: Grants,
  now: State,
  registered: Registered[],
  ctx: string,
) {
  const granted = (ds: string) => grants.datasources === "all" || grants.datasources.has(ds);
  const unknownPatient = await who.post("/patients/resolve", { datasource_id: "ds-1", external_uid: "never" });
  const unknownStudy = await who.post("/studies/resolve", { patient_identifier: "pat_never", external_uid: "never" });
  const shape = (r: { status: number; json: Json }) => [r.status, r.json?.code, r.json?.reason];
  expect(unknownPatient.status, ctx).toBe(400);
  for (const reg of registered) {
    const p = await who.post("/patients/resolve", { datasource_id: reg.datasourceId, external_uid: reg.uid });
    const s = await who.post("/studies/resolve", { patient_identifier: reg.patient, external_uid: reg.accession });
    // The datasource granted, and the patient's resource (if one was created) one the caller may see now (tombstoned or not);
    // for the study, its own resource (if one was created) as well.
    const patientSeen =
      granted(reg.datasourceId) && (!now.has(reg.patient) || versionVisible(grants, now, now, reg.patient));
    const studySeen = patientSeen && (!now.has(reg.study) || versionVisible(grants, now, now, reg.study));
    if (patientSeen)
      expect(p, `resolve ${reg.uid} in ${reg.datasourceId}, ${ctx}`).toEqual({
        status: 200,
        json: { identifier: reg.patient },
      });
    else expect(shape(p), `resolve ${reg.uid} in ${reg.datasourceId}, ${ctx}`).toEqual(shape(unknownPatient));
    if (studySeen)
      expect(s, `resolve ${reg.accession}, ${ctx}`).toEqual({ status: 200, json: { identifier: reg.study } });
    else expect(shape(s), `resolve ${reg.accession}, ${ctx}`).toEqual(shape(unknownStudy));
  }
}

/**
 * Registering again, as each narrow writer: a datasource not granted is 403;
 * a study of a patient the writer may not see answers as an unregistered
 * patient; otherwise `ALREADY_REGISTERED`, the same whether or not the
 * writer may see what was registered (one uid is one registration: kept and
 * listed in docs/access.md), and never the identifier.
 */
async function checkRegister(
  who: ReturnType<typeof caller>,
  grants: Grants,
  now: State,
  registered: Registered[],
  ctx: string,
) {
  const granted = (ds: string) => grants.datasources === "all" || grants.datasources.has(ds);
  const shape = (r: { status: number; json: Json }) => [r.status, r.json?.code, r.json?.reason];
  for (const reg of registered) {
    const p = await who.post("/patients/register", { datasource_id: reg.datasourceId, external_uid: reg.uid });
    expect(shape(p), `register ${reg.uid} again, ${ctx}`).toEqual(
      granted(reg.datasourceId)
        ? [400, "failed_precondition", "ALREADY_REGISTERED"]
        : [403, "permission_denied", "OUTSIDE_GRANTS"],
    );
    const s = await who.post("/studies/register", { patient_identifier: reg.patient, external_uid: reg.accession });
    const patientSeen =
      granted(reg.datasourceId) && (!now.has(reg.patient) || versionVisible(grants, now, now, reg.patient));
    expect(shape(s), `register ${reg.accession} again, ${ctx}`).toEqual([
      400,
      "failed_precondition",
      patientSeen ? "ALREADY_REGISTERED" : "NOT_REGISTERED",
    ]);
    for (const r of [p, s]) expect(JSON.stringify(r.json), ctx).not.toContain(reg.study);
  }
}

/** An upload-dir root is resumed only by the actor that started it (docs/contract/18-access.md). */
async function checkUploadRoot(owner: ReturnType<typeof caller>, other: ReturnType<typeof caller>, ctx: string) {
  const started = await owner.post("/s3/presign/upload-dir", { group: "leak", relpaths: ["a.bin"] });
  expect(started.status, ctx).toBe(200);
  const resumed = await other.post("/s3/presign/upload-dir", {
    group: "leak",
    relpaths: ["a.bin"],
    root: started.json.root,
  });
  expect([resumed.status, resumed.json?.code], `resume another's upload root, ${ctx}`).toEqual([404, "not_found"]);
  expect(
    (await owner.post("/s3/presign/upload-dir", { group: "leak", relpaths: ["b.bin"], root: started.json.root }))
      .status,
    ctx,
  ).toBe(200);
}

/** The state a commit stamped `at` produced: the first read point at or after it (each lies between two commits). */
function stateAt(model: Model, points: string[], at: string): State {
  const i = points.findIndex((p) => p >= at);
  expect(i, `no read point after ${at}`).toBeGreaterThan(0);
  return model.states[i] as State;
}

/** Statistics count only what the caller may see; a datasource it may not see is absent (and 404 in detail). */
async function checkStats(
  who: ReturnType<typeof caller>,
  full: ReturnType<typeof caller>,
  grants: Grants,
  now: State,
  registered: Registered[],
  ctx: string,
) {
  const sees = (id: string) => visible(grants, now, now, id);
  const granted = (ds: string) => grants.datasources === "all" || grants.datasources.has(ds);
  const visiblePatients = [...now.values()].filter((n) => n.type === "patient" && sees(n.id));
  // Listed: a granted datasource of the registry or of a patient the caller may see; the registry's counts are by datasource alone.
  const listed = [
    ...new Set([...visiblePatients.map((p) => p.datasourceId as string), ...registered.map((r) => r.datasourceId)]),
  ]
    .filter(granted)
    .sort();
  const inRegistry = (ds: string) => registered.filter((r) => r.datasourceId === ds).length;
  // Statistics attribute as section 8 does: a datasource resource is not one of its own datasource's resources.
  const perDs = (ds: string) =>
    [...now.keys()].filter((id) => sees(id) && now.get(id)?.type !== "datasource" && attribution(now, id) === ds);
  const r = await who.get("/datasources/stats");
  expect(r.status, ctx).toBe(200);
  expect(r.json, `stats, ${ctx}`).toEqual(
    listed.map((ds) => ({
      datasource_id: ds,
      patients: inRegistry(ds),
      studies: inRegistry(ds),
      resources: perDs(ds).length,
    })),
  );
  const f = await full.get("/datasources/stats");
  for (const entry of f.json as Json[]) {
    const ds = entry.datasource_id as string;
    const d = await who.get(`/datasources/detailed-stats?datasource_id=${encodeURIComponent(ds)}`);
    if (!listed.includes(ds)) {
      expect(d.status, `detailed stats of hidden ${ds}, ${ctx}`).toBe(404);
      continue;
    }
    expect(d.status, ctx).toBe(200);
    const ids = perDs(ds);
    const byType: Record<string, number> = {};
    const byLevel: Record<string, number> = {};
    for (const id of ids) {
      const n = now.get(id) as Node;
      byType[n.type] = (byType[n.type] ?? 0) + 1;
      byLevel[n.level] = (byLevel[n.level] ?? 0) + 1;
    }
    const files = ids.filter((id) => now.get(id)?.type === "file").length;
    const e = (d.json as Json[])[0];
    expect(
      {
        resources: e.resources,
        by_payload_type: e.by_payload_type,
        by_access_level: e.by_access_level,
        total_bytes: e.total_bytes,
      },
      `detailed stats of ${ds}, ${ctx}`,
    ).toEqual({
      resources: ids.length,
      by_payload_type: byType,
      by_access_level: byLevel,
      total_bytes: String(files * 10),
    });
  }
}

/**
 * Presign download and /s3/parquet answer a file's path or an artefact's uri
 * only to a caller who may see that resource now; /s3/list only to
 * datasource:* with clearance restricted. The unrestricted reader (every
 * datasource, restricted) answers 200 for every object, tombstoned ones too:
 * the objects are there, so a 404 is the rule's.
 */
async function checkStorage(
  who: ReturnType<typeof caller>,
  full: ReturnType<typeof caller>,
  grants: Grants,
  now: State,
  ctx: string,
) {
  // A path is reached through an active resource the caller may see that names it, unless a resource it may
  // not see (a tombstone too) names it as well: an answer for the path, whichever resource is asked about.
  const naming = (n: Node) => [...now.values()].filter((m) => m.object === n.object);
  const reachable = (n: Node) =>
    naming(n).some((m) => visible(grants, now, now, m.id)) &&
    naming(n).every((m) => versionVisible(grants, now, now, m.id));
  for (const n of [...now.values()].filter((x) => x.object !== undefined)) {
    const path = n.object as string;
    const expected = reachable(n) ? 200 : 404;
    const r = await who.post("/s3/presign", { direction: "download", path });
    expect(r.status, `presign ${n.id}, ${ctx}: ${JSON.stringify(r.json)}`).toBe(expected);
    const preview = `/s3/parquet?path=${encodeURIComponent(path)}&limit=2`;
    expect((await full.get(preview)).status, `s3 parquet of ${n.id} (unrestricted)`).toBe(200);
    const p = await who.get(preview);
    expect(p.status, `s3 parquet of ${n.id}, ${ctx}: ${JSON.stringify(p.json)}`).toBe(expected);
    if (expected === 200) expect(p.json, `s3 parquet of ${n.id}, ${ctx}`).toEqual((await full.get(preview)).json);
  }
  // The batch answers as the single calls would, all or nothing: the visible
  // paths together answer a URL each, in order; one hidden path among them
  // makes the whole batch 404.
  const objects = [...now.values()].filter((x) => x.object !== undefined);
  const shown = objects.filter(reachable).map((n) => ({ path: n.object as string }));
  const hidden = objects.filter((n) => !reachable(n)).map((n) => ({ path: n.object as string }));
  if (shown.length > 0) {
    const b = await who.post("/s3/presign/batch", { direction: "download", items: shown });
    expect(b.status, `presign batch of the visible objects, ${ctx}: ${JSON.stringify(b.json)}`).toBe(200);
    expect((b.json.urls as Json[]).length, `presign batch, ${ctx}`).toBe(shown.length);
  }
  for (const h of hidden) {
    const b = await who.post("/s3/presign/batch", { direction: "download", items: [...shown.slice(0, 2), h] });
    expect(b.status, `presign batch with hidden ${h.path}, ${ctx}: ${JSON.stringify(b.json)}`).toBe(404);
  }
  const everything = grants.datasources === "all" && grants.clearance === "restricted";
  const list = await who.get(`/s3/list?prefix=${encodeURIComponent("s3://resources/")}`);
  expect(list.status, `s3 list, ${ctx}`).toBe(everything ? 200 : 404);
  expect(
    (await full.get(`/s3/list?prefix=${encodeURIComponent("s3://resources/")}`)).status,
    "s3 list (unrestricted)",
  ).toBe(200);
}

/** History: the versions the caller may see (the stricter of then and now); 404 for a resource it may not see now. */
async function checkHistory(
  who: ReturnType<typeof caller>,
  full: ReturnType<typeof caller>,
  grants: Grants,
  model: Model,
  points: string[],
  ctx: string,
) {
  const now = current(model);
  for (const id of now.keys()) {
    const f = await full.post("/resources/history", { identifier: id, limit: 1000 });
    expect(f.status, `history of ${id} (unrestricted): ${JSON.stringify(f.json)}`).toBe(200);
    const expected = (f.json.versions as Json[]).filter((v) =>
      versionVisible(grants, stateAt(model, points, v.at as string), now, id),
    );
    const r = await who.post("/resources/history", { identifier: id, limit: 1000 });
    // A resource the caller may not see now is 404, as one never created.
    if (!versionVisible(grants, now, now, id)) {
      expect(r.status, `history of hidden ${id}, ${ctx}`).toBe(404);
      continue;
    }
    expect(r.status, ctx).toBe(200);
    expect(r.json.versions, `history of ${id}, ${ctx}`).toEqual(expected);
  }
}

/** Events since the start: every event the caller may see, in order, and nothing else; the stream's `at` still reaches the last commit. */
async function checkEvents(url: string, token: string, grants: Grants, model: Model, points: string[], ctx: string) {
  const now = current(model);
  const since = encodeURIComponent(points[0] as string);
  const collect = async (tok: string, withResources: boolean) => {
    // A bound for a stream that never reaches the last commit, not a measure:
    // on CI's loaded machine a 10 s bound cut a healthy stream short.
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), 60_000);
    const events: Json[] = [];
    let last = "";
    try {
      const res = await fetch(`${url}/events?since=${since}${withResources ? "&include_resources=true" : ""}`, {
        headers: { authorization: `Bearer ${tok}` },
        signal: ac.signal,
      });
      expect(res.status, ctx).toBe(200);
      let buf = "";
      const end = points[points.length - 1] as string;
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buf += Buffer.from(chunk).toString("utf8");
        let cut: number;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          // A frame's id is its at; a heartbeat or watermark is an id and a comment, with no data.
          const id = block.split("\n").find((l) => l.startsWith("id: "));
          if (id !== undefined) last = id.slice(4);
          const data = block.split("\n").find((l) => l.startsWith("data: "));
          if (data === undefined) continue;
          const msg = JSON.parse(data.slice(6)) as { at: string; events: Json[]; partial?: boolean };
          events.push(...msg.events);
          if (msg.partial !== true) last = msg.at;
        }
        // Every commit is before the last read point; once `at` passes the last commit, the stream has said all.
        const lastCommit = points[points.length - 2] as string;
        if (last !== "" && last >= lastCommit) break;
        void end;
      }
    } catch (err) {
      if (!ac.signal.aborted) throw err;
      throw new Error(
        `the events stream (include_resources=${withResources}) had not reached the last commit in 60 s: it got ${events.length} events, up to ${last || "nothing"}, ${ctx}`,
      );
    } finally {
      clearTimeout(timer);
      ac.abort();
    }
    return { events, last };
  };
  for (const withResources of [false, true]) {
    const all = await collect("tok-full", withResources);
    // The unrestricted stream carries a resource in every event exactly when asked to.
    for (const e of all.events)
      expect(e.resource?.identifier, `resource of an event, include_resources=${withResources}`).toBe(
        withResources ? e.identifier : undefined,
      );
    const mine = await collect(token, withResources);
    const expected = all.events.filter((e) =>
      versionVisible(grants, stateAt(model, points, e.at as string), now, e.identifier as string),
    );
    expect(mine.events, `events, include_resources=${withResources}, ${ctx}`).toEqual(expected);
    expect(mine.last >= (points[points.length - 2] as string), `events' at reached the last commit, ${ctx}`).toBe(true);
  }
}

describe("leak suite [pglite]", () => suite("pglite"));
describe.skipIf(!pgOk)("leak suite [postgres]", () => suite("postgres"));
