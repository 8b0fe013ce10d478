// docs/contract/18-access.md on every store read path, both backends: a generated
// history (re-parents across datasources, a patient moved to another
// datasource, levels raised and lowered, tombstones, restores, a create over
// a tombstone) written with full grants, then read by restricted callers at
// many points; every answer must equal the model's (test/access/model.ts).
import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import { ALL_GRANTS, grantsOf, type AccessLevel, type Grants, LOCAL_CALLER } from "../../src/access/index.js";
import {
  createQueryEngine,
  datasourceStats,
  listChildren,
  listParents,
  planQuery,
  type NewResource,
  type QueryRow,
} from "../../src/store/index.js";
import { describeBackends, uid } from "../store/backends.js";
import { expectCode, fromMicros, micros } from "../store/helpers.js";
import {
  active,
  attribution,
  childrenOf,
  descendantsOf,
  rng,
  statsAttribution,
  visible,
  visibleParents,
  type Node,
  type State,
} from "./model.js";

const LEVELS: readonly AccessLevel[] = ["public", "internal", "restricted"];

interface Step {
  readonly at: string;
  readonly state: State;
}

describeBackends("access: every read path against the model", (backend) => {
  for (const seed of [7, 1234]) {
    it(`history of seed ${seed}`, async () => {
      const { db, store } = backend();
      const p = uid("acc");
      const dsIds = [`${p}ds1`, `${p}ds2`, `${p}ds3`];
      const random = rng(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)] as T;
      const callers: Record<string, Grants> = {
        one: grantsOf([
          { kind: "datasource", id: dsIds[0] as string },
          { kind: "clearance", level: "internal" },
        ]),
        two: grantsOf([
          { kind: "datasource", id: dsIds[0] as string },
          { kind: "datasource", id: dsIds[1] as string },
          { kind: "clearance", level: "restricted" },
        ]),
        everyPublic: grantsOf([
          { kind: "datasource", id: "*" },
          { kind: "clearance", level: "public" },
        ]),
        all: ALL_GRANTS,
      };

      // The history, written with full grants, mirrored in the model.
      const steps: Step[] = [];
      let state = new Map<string, Node>();
      const record = (at: string, next: Map<string, Node>) => {
        state = next;
        steps.push({ at, state: next });
      };
      let n = 0;
      const fresh = () => `${p}n${(n++).toString().padStart(3, "0")}`;
      const newRes = (
        id: string,
        type: string,
        parent: string | null,
        level: AccessLevel,
        dsId?: string,
      ): NewResource => ({
        identifier: id,
        payloadType: type,
        parentIdentifier: parent,
        accessLevel: level,
        payload:
          type === "datasource"
            ? { name: id }
            : type === "patient"
              ? { datasource_id: dsId }
              : type === "study"
                ? { modality: "CT" }
                : type === "file"
                  ? { path: `s3://b/${id}` }
                  : {},
      });
      const createAll = async (items: NewResource[]) => {
        const { at } = await store.create(LOCAL_CALLER, items);
        const next = new Map(state);
        for (const i of items) {
          const ds = i.payloadType === "patient" ? (i.payload["datasource_id"] as string) : undefined;
          next.set(i.identifier, {
            type: i.payloadType,
            parent: i.parentIdentifier ?? null,
            level: i.accessLevel as AccessLevel,
            ...(ds !== undefined ? { ds } : {}),
            deleted: false,
            deletedBy: null,
            createdAt: at,
          });
        }
        record(at, next);
      };

      // The initial tree: datasource resources, patients under them, studies, series, files; one loose study.
      const initial: NewResource[] = dsIds.map((d) => newRes(d, "datasource", null, "public"));
      const patients: string[] = [];
      for (let i = 0; i < 5; i++) {
        const id = fresh();
        patients.push(id);
        const d = pick(dsIds);
        initial.push(newRes(id, "patient", d, pick(LEVELS), d));
      }
      const inner: string[] = [];
      for (let i = 0; i < 8; i++) {
        const id = fresh();
        initial.push(newRes(id, "study", pick([...patients, ...inner]), pick(LEVELS)));
        inner.push(id);
      }
      for (let i = 0; i < 6; i++) initial.push(newRes(fresh(), pick(["series", "file"]), pick(inner), pick(LEVELS)));
      const loose = fresh();
      initial.push(newRes(loose, "study", null, pick(LEVELS)));
      initial.push(newRes(fresh(), "series", loose, pick(LEVELS)));
      await createAll(initial);

      const isUnder = (s: State, id: string, root: string): boolean => {
        for (let cur: string | null = id, g = 0; cur !== null && g < 1000; g++) {
          if (cur === root) return true;
          cur = s.get(cur)?.parent ?? null;
        }
        return false;
      };
      const activeOf = (pred: (id: string, node: Node) => boolean) =>
        [...state.entries()].filter(([id, nd]) => !nd.deleted && pred(id, nd)).map(([id]) => id);

      for (let i = 0; i < 16; i++) {
        const kind = pick([
          "reparent",
          "reparent",
          "dsChange",
          "level",
          "level",
          "delete",
          "restore",
          "create",
          "recreate",
        ] as const);
        if (kind === "reparent") {
          const movable = activeOf((_, nd) => nd.type !== "patient" && nd.type !== "datasource");
          const x = pick(movable);
          const targets = activeOf(
            (id, nd) => (nd.type === "patient" || nd.type === "study") && !isUnder(state, id, x),
          );
          if (!x || targets.length === 0) continue;
          const y = pick(targets);
          const { at } = await store.update(LOCAL_CALLER, [[x, { parentIdentifier: y }]]);
          const next = new Map(state);
          next.set(x, { ...(next.get(x) as Node), parent: y });
          record(at, next);
        } else if (kind === "dsChange") {
          const x = pick(activeOf((_, nd) => nd.type === "patient"));
          if (!x) continue;
          const d = pick(dsIds.filter((id) => id !== state.get(x)?.ds));
          const { at } = await store.update(LOCAL_CALLER, [[x, { payload: { datasource_id: d } }]]);
          const next = new Map(state);
          next.set(x, { ...(next.get(x) as Node), ds: d });
          record(at, next);
        } else if (kind === "level") {
          const x = pick(activeOf((_, nd) => nd.type !== "datasource"));
          const level = pick(LEVELS.filter((l) => l !== state.get(x)?.level));
          const { at } = await store.update(LOCAL_CALLER, [[x, { accessLevel: level }]]);
          const next = new Map(state);
          next.set(x, { ...(next.get(x) as Node), level });
          record(at, next);
        } else if (kind === "delete") {
          const x = pick(activeOf((_, nd) => nd.type !== "datasource"));
          const cascade = random() < 0.6;
          const { at, count } = await store.delete(LOCAL_CALLER, [x], { cascade });
          const hit = cascade ? [x, ...descendantsOf(state, x)] : [x];
          expect(count).toBe(hit.length);
          const next = new Map(state);
          for (const id of hit) next.set(id, { ...(next.get(id) as Node), deleted: true, deletedBy: at });
          record(at, next);
        } else if (kind === "restore") {
          const gone = [...state.entries()].filter(([, nd]) => nd.deleted).map(([id]) => id);
          if (gone.length === 0) continue;
          const x = pick(gone);
          const cascade = random() < 0.6;
          const { at, count } = await store.restore(LOCAL_CALLER, [x], { cascade });
          const hit = [x];
          const by = state.get(x)?.deletedBy;
          if (cascade) {
            const todo = [x];
            while (todo.length > 0) {
              const cur = todo.shift() as string;
              for (const [id, nd] of state) {
                if (nd.parent === cur && nd.deleted && nd.deletedBy === by) {
                  hit.push(id);
                  todo.push(id);
                }
              }
            }
          }
          expect(count).toBe(hit.length);
          const next = new Map(state);
          for (const id of hit) next.set(id, { ...(next.get(id) as Node), deleted: false, deletedBy: null });
          record(at, next);
        } else if (kind === "create") {
          const parent = pick(activeOf((_, nd) => nd.type === "patient" || nd.type === "study"));
          await createAll([newRes(fresh(), pick(["study", "series"]), parent ?? null, pick(LEVELS))]);
        } else {
          // Over a tombstone: a new life, maybe another type and parent; its old children stay under it.
          const gone = [...state.entries()]
            .filter(([, nd]) => nd.deleted && nd.type !== "datasource")
            .map(([id]) => id);
          if (gone.length === 0) continue;
          const x = pick(gone);
          const parent = pick(
            activeOf((id, nd) => (nd.type === "datasource" || nd.type === "study") && !isUnder(state, id, x)),
          );
          const d = pick(dsIds);
          await createAll([
            pick([
              newRes(x, "patient", parent ?? null, pick(LEVELS), d),
              newRes(x, "study", parent ?? null, pick(LEVELS)),
            ]),
          ]);
        }
      }

      const ids = [...state.keys()].sort();
      const now = state;
      // Points: each step's stamp and the microsecond before it, and now.
      const points: { asOf: string | undefined; then: State }[] = [{ asOf: undefined, then: now }];
      const empty: State = new Map();
      steps.forEach((s, i) => {
        points.push({ asOf: s.at, then: s.state });
        points.push({ asOf: fromMicros(micros(s.at) - 1n), then: i === 0 ? empty : (steps[i - 1] as Step).state });
      });
      const engine = createQueryEngine(db);
      const plan = (req: Parameters<typeof create<typeof QueryRequestSchema>>[1]) =>
        planQuery(create(QueryRequestSchema, req));
      const sorted = (xs: readonly string[]) => [...xs].sort();
      const opts = (asOf: string | undefined) => (asOf !== undefined ? { asOf } : {});

      for (const [name, grants] of Object.entries(callers)) {
        for (const [k, { asOf, then }] of points.entries()) {
          const where = `${name} at ${asOf ?? "now"}`;
          const sees = (id: string) => active(then, id) && visible(then, now, grants, id);
          const seen = ids.filter(sees);
          const seenChildren = (parent: string | null) => childrenOf(then, parent).filter(sees);

          // read, with children
          const rows = await store.read(grants, ids, opts(asOf));
          expect(
            rows.map((r) => r.identifier),
            `read ${where}`,
          ).toEqual(seen);
          for (const r of rows)
            expect(r.children, `read children of ${r.identifier} ${where}`).toEqual(seenChildren(r.identifier));

          // query by identifiers, count, export
          const all = plan({ identifiers: ids });
          const page = await engine.page(all, grants, { asOf, limit: 10_000 });
          expect(sorted(page.resources.map((r) => r.identifier)), `query ${where}`).toEqual(seen);
          expect(await engine.count(all, grants, asOf), `count ${where}`).toBe(BigInt(seen.length));
          const exported: string[] = [];
          await engine.forEachBatch(all, grants, { asOf }, 7, (batch: QueryRow[]) => {
            exported.push(...batch.map((r) => r.identifier));
            return Promise.resolve();
          });
          expect(sorted(exported), `export ${where}`).toEqual(seen);
          // payload type and a metadata filter
          const studies = plan({
            identifiers: ids,
            payloadType: "study",
            filters: [
              { field: "access_level", op: "ne", value: { kind: { case: "stringValue", value: "restricted" } } },
            ],
          });
          const wantStudies = seen.filter(
            (id) => then.get(id)?.type === "study" && then.get(id)?.level !== "restricted",
          );
          expect(
            sorted((await engine.page(studies, grants, { asOf, limit: 10_000 })).resources.map((r) => r.identifier)),
            `studies ${where}`,
          ).toEqual(wantStudies);

          // parent queries: direct and every descendant (the full tree's, filtered)
          if (k % 4 === 0) {
            for (const root of [...dsIds, ...patients.slice(0, 3), loose]) {
              const direct = await engine.page(plan({ parentIdentifier: root }), grants, { asOf, limit: 10_000 });
              expect(sorted(direct.resources.map((r) => r.identifier)), `children query ${root} ${where}`).toEqual(
                sorted(childrenOf(then, root).filter(sees)),
              );
              const deep = plan({ parentIdentifier: root, includeIndirectParents: true });
              const want = sorted(descendantsOf(then, root).filter(sees));
              expect(
                sorted((await engine.page(deep, grants, { asOf, limit: 10_000 })).resources.map((r) => r.identifier)),
                `descendants ${root} ${where}`,
              ).toEqual(want);
              expect(await engine.count(deep, grants, asOf), `descendant count ${root} ${where}`).toBe(
                BigInt(want.length),
              );
            }
            // /children and its counts; /parents
            for (const id of ids) {
              if (!sees(id)) {
                await expectCode(listChildren(db, grants, { parentIdentifier: id, ...opts(asOf) }), Code.NotFound);
                await expectCode(listParents(db, grants, id, opts(asOf)), Code.NotFound);
                continue;
              }
              const nodes = await listChildren(db, grants, { parentIdentifier: id, ...opts(asOf) });
              expect(
                nodes.map((x) => x.identifier),
                `/children ${id} ${where}`,
              ).toEqual(seenChildren(id));
              for (const node of nodes) {
                expect(node.childCount, `child_count ${node.identifier} ${where}`).toBe(
                  seenChildren(node.identifier).length,
                );
                expect(node.descendantCount, `descendant_count ${node.identifier} ${where}`).toBe(
                  descendantsOf(then, node.identifier).filter(sees).length,
                );
              }
              expect(await listParents(db, grants, id, opts(asOf)), `/parents ${id} ${where}`).toEqual(
                visibleParents(then, now, grants, id),
              );
            }
            const roots = (await listChildren(db, grants, opts(asOf)))
              .map((x) => x.identifier)
              .filter((id) => id.startsWith(p));
            expect(roots, `roots ${where}`).toEqual(seenChildren(null));
          }
        }

        // statistics (now): only granted datasources, counting only what the caller may see
        const stats = (await datasourceStats(db, grants)).filter((r) => r.datasourceId.startsWith(p));
        // A datasource is listed through an active patient the caller may see (no registry rows here).
        const listedDs = dsIds.filter((d) =>
          [...now].some(
            ([nid, nd]) => !nd.deleted && nd.type === "patient" && nd.ds === d && visible(now, now, grants, nid),
          ),
        );
        const wantDs = listedDs.filter((d) => grants.datasources === "all" || grants.datasources.has(d));
        expect(
          stats.map((r) => r.datasourceId),
          `stats ${name}`,
        ).toEqual(wantDs);
        for (const row of stats) {
          const want = ids.filter(
            (id) => statsAttribution(now, id) === row.datasourceId && visible(now, now, grants, id),
          ).length;
          expect(row.resources, `stats resources ${row.datasourceId} ${name}`).toBe(want);
        }
        for (const d of dsIds) {
          if (grants.datasources !== "all" && !grants.datasources.has(d))
            await expectCode(datasourceStats(db, grants, { datasourceId: d }), Code.NotFound);
        }
      }

      // The attribution column agrees with the model now.
      const { rows: attr } = await db.query<{ identifier: string; datasource_id: string | null }>(
        "SELECT identifier, datasource_id FROM resources WHERE identifier = ANY($1::text[]) ORDER BY identifier",
        [ids],
      );
      expect(attr.map((r) => [r.identifier, r.datasource_id])).toEqual(ids.map((id) => [id, attribution(now, id)]));

      // A cursor taken by one caller does not continue for another.
      const byOne = await engine.page(
        planQuery(create(QueryRequestSchema, { identifiers: ids })),
        callers["two"] as Grants,
        { limit: 1 },
      );
      expect(byOne.nextCursor).toBeDefined();
      for (const other of [callers["one"], callers["everyPublic"], ALL_GRANTS] as Grants[]) {
        await expectCode(
          engine.page(planQuery(create(QueryRequestSchema, { identifiers: ids })), other, {
            cursor: byOne.nextCursor,
            limit: 10,
          }),
          Code.InvalidArgument,
        );
      }
      const cont = await engine.page(
        planQuery(create(QueryRequestSchema, { identifiers: ids })),
        callers["two"] as Grants,
        { cursor: byOne.nextCursor, limit: 10_000 },
      );
      expect(cont.resources.length + 1).toBe(
        ids.filter((id) => active(now, id) && visible(now, now, callers["two"] as Grants, id)).length,
      );
    }, 600_000);
  }
});
