// The tree counts are kept by the writes (migrations/0020-tree-counts.ts),
// with no refresh and no background job: after every change, with a second
// writer changing the same forest at the same time, every listing's
// child_count and descendant_count, and the count of every subtree, equal a
// count made here from the rows, for each caller's grants (docs/access.md:
// what the caller may see now, descendants walked through every active
// resource, then filtered).
import { create } from "@bufbuild/protobuf";
import { expect, it } from "vitest";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import { ALL_GRANTS, LOCAL_CALLER, type Grants } from "../../src/access/index.js";
import { createQueryEngine, listChildren, planQuery, type NewResource } from "../../src/store/index.js";
import { describeBackends } from "../store/backends.js";
import { ds, study } from "../store/helpers.js";
import { buildServices } from "./harness.js";

const DATASOURCES = ["ds-a", "ds-b", "ds-c"];
const LEVELS = ["public", "internal", "restricted"] as const;
const CALLERS: Record<string, Grants> = {
  everything: ALL_GRANTS,
  "ds-a, internal": { datasources: new Set(["ds-a"]), clearance: "internal" },
  "ds-a and ds-b, public": { datasources: new Set(["ds-a", "ds-b"]), clearance: "public" },
  "every datasource, internal": { datasources: "all", clearance: "internal" },
  "no datasource, restricted": { datasources: new Set(), clearance: "restricted" },
};

const patient = (identifier: string, parent: string | null, datasourceId: string): NewResource => ({
  identifier,
  payloadType: "patient",
  parentIdentifier: parent,
  payload: { datasource_id: datasourceId, sex: "female", birth_year: 1970 },
});

interface Row {
  identifier: string;
  parent_identifier: string | null;
  payload_type: string;
  is_deleted: boolean;
  access_level: string;
  pds: string | null;
}

/** The expected listing of every node, per caller, computed from the rows alone (attribution walked here, not read from the stored column). */
function expectedFrom(rows: Row[]) {
  const byId = new Map(rows.map((r) => [r.identifier, r]));
  const attribution = (r: Row): string | null => {
    if (r.payload_type === "patient") return r.pds;
    if (r.payload_type === "datasource") return r.identifier;
    for (let p = r.parent_identifier, n = 0; p !== null && n < 1000; n++) {
      const a = byId.get(p);
      if (a === undefined) return null;
      if (a.payload_type === "patient") return a.pds;
      p = a.parent_identifier;
    }
    return null;
  };
  const sees = (g: Grants, r: Row) => {
    const ds = attribution(r);
    const dsOk = ds === null || g.datasources === "all" || g.datasources.has(ds);
    return dsOk && LEVELS.indexOf(r.access_level as (typeof LEVELS)[number]) <= LEVELS.indexOf(g.clearance);
  };
  const active = rows.filter((r) => !r.is_deleted);
  const kids = (p: string | null) => active.filter((r) => r.parent_identifier === p);
  const desc = (p: string): Row[] => kids(p).flatMap((k) => [k, ...desc(k.identifier)]);
  return {
    nodes: rows.map((r) => r.identifier),
    listing: (g: Grants, p: string | null) =>
      kids(p)
        .filter((k) => sees(g, k))
        .map((k) => [
          k.identifier,
          kids(k.identifier).filter((x) => sees(g, x)).length,
          desc(k.identifier).filter((x) => sees(g, x)).length,
        ])
        .sort(),
    subtree: (g: Grants, p: string) => desc(p).filter((x) => sees(g, x)).length,
    visibleActive: (g: Grants, id: string) => {
      const r = byId.get(id);
      return r !== undefined && !r.is_deleted && sees(g, r);
    },
  };
}

describeBackends("tree counts kept by the writes", (backend) => {
  it("the refresh endpoint answers at once that there is nothing to refresh", async () => {
    const b = backend();
    const svc = await buildServices(b);
    await b.store.create(LOCAL_CALLER, [ds("rf"), study("rf1", "rf")]);
    const { message } = await svc.admin.refreshMaterializedViews({});
    expect(message).toMatch(/nothing to refresh/);
    const nodes = await listChildren(b.db, ALL_GRANTS, { parentIdentifier: "rf" });
    expect(nodes.map((n) => [n.identifier, n.childCount, n.descendantCount])).toEqual([["rf1", 0, 0]]);
  });

  it("equal a count of the rows for every caller after moves, deletes, restores, levels and datasource changes, with a second writer running", async () => {
    const b = backend();
    const engine = createQueryEngine(b.db);
    let seed = 4242;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const pick = <T>(xs: readonly T[]) => xs[rand(xs.length)] as T;
    // The datasources, a patient under each (of another datasource), then a forest of studies below.
    await b.store.create(
      LOCAL_CALLER,
      DATASOURCES.map((d) => ds(d)),
    );
    await b.store.create(
      LOCAL_CALLER,
      DATASOURCES.map((d, i) => patient(`p-${d}`, d, DATASOURCES[(i + 1) % 3]!)),
    );
    const ids = Array.from({ length: 24 }, (_, i) => `n${String(i).padStart(2, "0")}`);
    const placed: string[] = DATASOURCES.map((d) => `p-${d}`);
    const first: NewResource[] = [];
    for (const id of ids) {
      first.push(
        rand(6) === 0
          ? patient(id, pick(placed), pick(DATASOURCES))
          : study(id, pick(placed), { accessLevel: pick(LEVELS) }),
      );
      placed.push(id);
    }
    await b.store.create(LOCAL_CALLER, first);

    const rowsNow = async () =>
      (
        await b.db.query<Row>(
          "SELECT identifier, parent_identifier, payload_type, is_deleted, access_level, payload->>'datasource_id' AS pds FROM resources",
        )
      ).rows;

    const check = async (label: string) => {
      const model = expectedFrom(await rowsNow());
      for (const [who, g] of Object.entries(CALLERS)) {
        const roots = (await listChildren(b.db, g, {}))
          .map((n) => [n.identifier, n.childCount, n.descendantCount])
          .sort();
        expect(roots, `${label}, ${who}: roots`).toEqual(model.listing(g, null));
        for (const id of model.nodes) {
          const count = await engine.count(
            planQuery(create(QueryRequestSchema, { parentIdentifier: id, includeIndirectParents: true })),
            g,
            undefined,
          );
          expect(Number(count), `${label}, ${who}: count below ${id}`).toBe(model.subtree(g, id));
          if (!model.visibleActive(g, id)) continue;
          const listed = (await listChildren(b.db, g, { parentIdentifier: id }))
            .map((n) => [n.identifier, n.childCount, n.descendantCount])
            .sort();
          expect(listed, `${label}, ${who}: children of ${id}`).toEqual(model.listing(g, id));
        }
      }
    };

    /** One change of the forest, drawn from the rows as they are: a move, a delete or restore (cascade or not), a level, a patient's datasource, a create. */
    const change = async (tag: string) => {
      const rows = await rowsNow();
      const active = rows
        .filter((r) => !r.is_deleted)
        .map((r) => r.identifier)
        .filter((id) => !DATASOURCES.includes(id));
      const gone = rows.filter((r) => r.is_deleted).map((r) => r.identifier);
      const patients = rows.filter((r) => !r.is_deleted && r.payload_type === "patient").map((r) => r.identifier);
      try {
        switch (rand(7)) {
          case 0:
            if (active.length > 1)
              await b.store.update(LOCAL_CALLER, [
                [pick(active), { parentIdentifier: rand(5) === 0 ? null : pick([...active, ...DATASOURCES]) }],
              ]);
            break;
          case 1:
            if (active.length > 0) await b.store.delete(LOCAL_CALLER, [pick(active)], { cascade: rand(2) === 0 });
            break;
          case 2:
            if (gone.length > 0) await b.store.restore(LOCAL_CALLER, [pick(gone)], { cascade: rand(2) === 0 });
            break;
          case 3:
            if (active.length > 0) await b.store.update(LOCAL_CALLER, [[pick(active), { accessLevel: pick(LEVELS) }]]);
            break;
          case 4:
            if (patients.length > 0) {
              await b.store.update(LOCAL_CALLER, [
                [pick(patients), { payload: { datasource_id: pick(DATASOURCES), sex: "female", birth_year: 1970 } }],
              ]);
            }
            break;
          case 5: {
            // Two moves in one batch, whatever they touch.
            if (active.length > 3) {
              const [x, y] = [pick(active), pick(active)];
              if (x !== y)
                await b.store.update(LOCAL_CALLER, [
                  [x, { parentIdentifier: pick(active) }],
                  [y, { parentIdentifier: pick(DATASOURCES) }],
                ]);
            }
            break;
          }
          default:
            await b.store.create(LOCAL_CALLER, [
              study(`${tag}-c${rand(1e6)}`, pick([...active, ...DATASOURCES]), { accessLevel: pick(LEVELS) }),
            ]);
        }
      } catch {
        // A refused change (a cycle, a parent deleted meanwhile by the other writer) writes nothing; the check still runs.
      }
    };

    for (let step = 0; step < 14; step++) {
      // Two writers at once: their transactions interleave with each other's triggers.
      await Promise.all([change(`a${step}`), change(`b${step}`), change(`c${step}`)]);
      await check(`step ${step}`);
    }
  }, 240_000);
});

describeBackends("tree counts of statements that change many rows at once", (backend) => {
  interface Placed {
    identifier: string;
    parent_identifier: string | null;
    is_deleted: boolean;
    datasource_id: string | null;
    access_level: string;
    payload_type: string;
  }
  /** The stored counts (zeros left out) and the same counts walked here from the rows: each active row counts at its parent and up while the node is active. */
  const storedAndModel = async (db: { query: <T>(sql: string) => Promise<{ rows: T[] }> }) => {
    const rows = (
      await db.query<Placed>(
        "SELECT identifier, parent_identifier, is_deleted, datasource_id, access_level, payload_type FROM resources",
      )
    ).rows;
    const byId = new Map(rows.map((r) => [r.identifier, r]));
    const model = new Map<string, [number, number]>();
    for (const r of rows) {
      if (r.is_deleted) continue;
      let node = r.parent_identifier;
      for (let first = true, n = 0; node !== null && n < 1000; first = false, n++) {
        const key = [node, r.datasource_id, r.access_level, r.payload_type].join("|");
        const [c, d] = model.get(key) ?? [0, 0];
        model.set(key, [c + (first ? 1 : 0), d + 1]);
        const at = byId.get(node);
        if (at === undefined || at.is_deleted) break;
        node = at.parent_identifier;
      }
    }
    const stored = (
      await db.query<{
        node: string;
        datasource_id: string | null;
        access_level: string;
        payload_type: string;
        children: string;
        descendants: string;
      }>(
        "SELECT node, datasource_id, access_level, payload_type, children, descendants FROM tree_counts WHERE children <> 0 OR descendants <> 0",
      )
    ).rows.map((t) => [
      [t.node, t.datasource_id, t.access_level, t.payload_type].join("|"),
      Number(t.children),
      Number(t.descendants),
    ]);
    return { stored: stored.sort(), model: [...model].map(([k, [c, d]]) => [k, c, d]).sort(), rows };
  };

  it("stay exact when one statement mixes cascades, restores, moves and level changes, and when a create takes over a tombstone with a child", async () => {
    const b = backend();
    let seed = 777;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    // A forest whose parents come earlier in the list (so a move to an earlier node never makes a cycle).
    await b.store.create(LOCAL_CALLER, [ds("m-ds")]);
    const ids = Array.from({ length: 60 }, (_, i) => `m${String(i).padStart(2, "0")}`);
    await b.store.create(
      LOCAL_CALLER,
      ids.map((id, i) => study(id, i < 3 ? "m-ds" : ids[rand(i)]!, { accessLevel: LEVELS[rand(3)] })),
    );
    const statement = async (changes: { identifier: string; p: string | null; d: boolean; l: string }[]) => {
      await b.db.query("UPDATE clock SET last = greatest(clock_timestamp(), last + interval '1 microsecond')");
      await b.db.query(
        `UPDATE resources r SET parent_identifier = x.p, is_deleted = x.d, access_level = x.l,
            updated_at = (SELECT last FROM clock), version = r.version + 1
           FROM jsonb_to_recordset($1::text::jsonb) AS x(identifier text, p text, d boolean, l text)
          WHERE r.identifier = x.identifier`,
        [JSON.stringify(changes)],
      );
    };
    for (let step = 0; step < 16; step++) {
      const { rows } = await storedAndModel(b.db);
      const byId = new Map(rows.map((r) => [r.identifier, r]));
      const below = (id: string): string[] =>
        rows
          .filter((r) => r.parent_identifier === id && !r.is_deleted)
          .flatMap((r) => [r.identifier, ...below(r.identifier)]);
      const changes = new Map<string, { identifier: string; p: string | null; d: boolean; l: string }>();
      const put = (id: string, edit: Partial<{ p: string | null; d: boolean; l: string }>) => {
        const r = byId.get(id)!;
        const was = changes.get(id) ?? { identifier: id, p: r.parent_identifier, d: r.is_deleted, l: r.access_level };
        changes.set(id, { ...was, ...edit });
      };
      // A cascade (delete of an active subtree, or restore of a tombstone and the tombstones below it)...
      const top = ids[rand(ids.length)]!;
      if (byId.get(top)!.is_deleted) {
        const gone = (id: string): string[] =>
          rows
            .filter((r) => r.parent_identifier === id && r.is_deleted)
            .flatMap((r) => [r.identifier, ...gone(r.identifier)]);
        for (const id of [top, ...gone(top)]) put(id, { d: false });
      } else {
        for (const id of [top, ...below(top)]) put(id, { d: true });
      }
      // ...with moves, single deletes and restores, and level changes of other rows, in the same statement.
      for (let k = 0; k < 8; k++) {
        const i = 3 + rand(ids.length - 3);
        const id = ids[i]!;
        switch (rand(4)) {
          case 0:
            put(id, { p: ids[rand(i)]! });
            break;
          case 1:
            put(id, { d: !(changes.get(id)?.d ?? byId.get(id)!.is_deleted) });
            break;
          case 2:
            put(id, { l: LEVELS[rand(3)]! });
            break;
          default:
            put(id, { p: ids[rand(i)]!, d: rand(2) === 0, l: LEVELS[rand(3)]! });
        }
      }
      await statement([...changes.values()]);
      const { stored, model } = await storedAndModel(b.db);
      expect(stored, `step ${step}: ${changes.size} rows in one statement`).toEqual(model);
    }

    // A create over a tombstone with a new child below it, in one batch (one INSERT ... ON CONFLICT DO UPDATE).
    await b.store.create(LOCAL_CALLER, [study("t-top", "m-ds"), study("t-mid", "t-top"), study("t-low", "t-mid")]);
    await b.store.delete(LOCAL_CALLER, ["t-mid"], { cascade: true });
    await b.store.create(LOCAL_CALLER, [study("t-mid", "t-top"), study("t-new", "t-mid"), study("t-new2", "t-new")]);
    const { stored, model } = await storedAndModel(b.db);
    expect(stored).toEqual(model);
  }, 120_000);
});
