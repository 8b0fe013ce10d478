// History equals a model (docs/contract/19-audit-history.md): random
// histories of creates (also over tombstones), updates, is_deleted updates,
// cascading deletes and restores by random actors; every identifier's
// History, paged with random limits and cut by random since/until, equals
// what the model says each write wrote: version, at, actor, kind and the
// resource as it read then.
import fc from "fast-check";
import { expect, it } from "vitest";
import { ALL_GRANTS, type Caller } from "../../src/access/index.js";
import type { HistoryVersion, ResourceStore } from "../../src/store/index.js";
import { describeBackends, uid } from "../store/backends.js";
import { study } from "../store/helpers.js";

const N = 6;
type Op =
  | { kind: "create"; i: number; parent: number | null }
  | { kind: "license"; i: number; value: string | null }
  | { kind: "setDeleted"; i: number; value: boolean }
  | { kind: "delete"; i: number; cascade: boolean }
  | { kind: "restore"; i: number; cascade: boolean };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant("create" as const),
      i: fc.nat(N - 1),
      parent: fc.option(fc.nat(N - 1), { nil: null }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("license" as const),
      i: fc.nat(N - 1),
      value: fc.option(fc.constantFrom("MIT", "CC0"), { nil: null }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant("setDeleted" as const), i: fc.nat(N - 1), value: fc.boolean() }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant("delete" as const), i: fc.nat(N - 1), cascade: fc.boolean() }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant("restore" as const), i: fc.nat(N - 1), cascade: fc.boolean() }),
  },
);

interface Row {
  parent: string | null;
  license: string | null;
  deleted: boolean;
  deletedBy: string | null;
  createdAt: string;
}
interface ModelVersion {
  version: number;
  at: string;
  actor: string;
  kind: string;
  parent: string | null;
  license: string | null;
  createdAt: string;
}

class Model {
  rows = new Map<string, Row>();
  versions = new Map<string, ModelVersion[]>();
  private write(id: string, row: Row, at: string, actor: string, kind: string): void {
    this.rows.set(id, row);
    const list = this.versions.get(id) ?? [];
    list.push({
      version: list.length + 1,
      at,
      actor,
      kind,
      parent: row.parent,
      license: row.license,
      createdAt: row.createdAt,
    });
    this.versions.set(id, list);
  }
  active(id: string): boolean {
    const r = this.rows.get(id);
    return r !== undefined && !r.deleted;
  }
  children(id: string): string[] {
    return [...this.rows].filter(([, r]) => r.parent === id).map(([c]) => c);
  }
  /** Whether the store should accept the op (the generator only sends valid ones). */
  valid(op: Op, ids: readonly string[]): boolean {
    const id = ids[op.i] as string;
    switch (op.kind) {
      case "create":
        return (
          !this.active(id) && (op.parent === null || (op.parent !== op.i && this.active(ids[op.parent] as string)))
        );
      case "license":
        return this.active(id);
      case "setDeleted":
        return this.rows.has(id);
      default:
        return true;
    }
  }
  apply(op: Op, ids: readonly string[], at: string, actor: string): void {
    const id = ids[op.i] as string;
    const cur = this.rows.get(id);
    switch (op.kind) {
      case "create":
        this.write(
          id,
          {
            parent: op.parent === null ? null : (ids[op.parent] as string),
            license: null,
            deleted: false,
            deletedBy: null,
            createdAt: at,
          },
          at,
          actor,
          "created",
        );
        return;
      case "license":
        if (cur && cur.license !== op.value) this.write(id, { ...cur, license: op.value }, at, actor, "updated");
        return;
      case "setDeleted":
        if (cur && cur.deleted !== op.value) {
          this.write(
            id,
            { ...cur, deleted: op.value, deletedBy: op.value ? at : null },
            at,
            actor,
            op.value ? "deleted" : "restored",
          );
        }
        return;
      case "delete": {
        if (!this.active(id)) return;
        const sub: string[] = [];
        const walk = (x: string) => {
          sub.push(x);
          if (op.cascade) for (const c of this.children(x)) if (this.active(c)) walk(c);
        };
        walk(id);
        for (const x of sub)
          this.write(x, { ...(this.rows.get(x) as Row), deleted: true, deletedBy: at }, at, actor, "deleted");
        return;
      }
      case "restore": {
        if (!cur || !cur.deleted) return;
        const sub = new Set<string>();
        const walk = (x: string, by: string | null) => {
          sub.add(x);
          if (op.cascade) {
            for (const c of this.children(x)) {
              const r = this.rows.get(c) as Row;
              if (r.deleted && r.deletedBy === by && !sub.has(c)) walk(c, by);
            }
          }
        };
        walk(id, cur.deletedBy);
        for (const x of sub)
          this.write(x, { ...(this.rows.get(x) as Row), deleted: false, deletedBy: null }, at, actor, "restored");
      }
    }
  }
}

async function run(store: ResourceStore, op: Op, ids: readonly string[], caller: Caller): Promise<string> {
  const id = ids[op.i] as string;
  switch (op.kind) {
    case "create":
      return (await store.create(caller, [study(id, op.parent === null ? null : (ids[op.parent] as string))])).at;
    case "license":
      return (await store.update(caller, [[id, { license: op.value }]])).at;
    case "setDeleted":
      return (await store.update(caller, [[id, { isDeleted: op.value }]])).at;
    case "delete":
      return (await store.delete(caller, [id], { cascade: op.cascade })).at;
    case "restore":
      return (await store.restore(caller, [id], { cascade: op.cascade })).at;
  }
}

/** Every page of a history, following the cursors. */
async function allPages(
  store: ResourceStore,
  id: string,
  limit: number,
  range: { since?: string; until?: string },
): Promise<HistoryVersion[]> {
  const out: HistoryVersion[] = [];
  let cursor: string | undefined;
  for (let pages = 0; pages < 1000; pages++) {
    const page = await store.history(id, ALL_GRANTS, { ...range, limit, ...(cursor !== undefined ? { cursor } : {}) });
    expect(page.versions.length).toBeLessThanOrEqual(limit);
    out.push(...page.versions);
    if (page.nextCursor === undefined) return out;
    // A cursor is only handed out when a version follows.
    expect(page.versions.length).toBe(limit);
    cursor = page.nextCursor;
  }
  throw new Error("too many pages");
}

describeBackends("History equals a model of random histories", (backend) => {
  it("over creates, updates, is_deleted, cascading deletes and restores by several actors", async () => {
    const { store } = backend();
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ op: opArb, actor: fc.constantFrom("ann", "bob", "token#3") }), {
          minLength: 1,
          maxLength: 30,
        }),
        fc.integer({ min: 1, max: 5 }),
        fc.nat(),
        fc.nat(),
        async (steps, limit, a, b) => {
          const p = uid("h");
          const ids = Array.from({ length: N }, (_, i) => `${p}-${i}`);
          const model = new Model();
          const stamps: string[] = [];
          for (const { op, actor } of steps) {
            if (!model.valid(op, ids)) continue;
            const at = await run(store, op, ids, { actor, grants: ALL_GRANTS });
            stamps.push(at);
            model.apply(op, ids, at, actor);
          }
          // A range between two of the stamps (or open), since inclusive and until exclusive.
          const since = stamps.length > 0 && a % 3 !== 0 ? stamps[a % stamps.length] : undefined;
          const until = stamps.length > 0 && b % 3 !== 0 ? stamps[b % stamps.length] : undefined;
          for (const id of ids) {
            const want = model.versions.get(id);
            if (want === undefined) {
              await expect(store.history(id, ALL_GRANTS)).rejects.toMatchObject({ code: 5 }); // never created: not_found
              continue;
            }
            const got = await allPages(store, id, limit, {});
            const shape = (v: HistoryVersion) => ({
              version: v.version,
              at: v.at,
              actor: v.actor,
              kind: v.kind,
              parent: v.resource.parentIdentifier,
              license: v.resource.license,
              createdAt: v.resource.createdAt,
            });
            expect(got.map(shape)).toEqual(want);
            expect(
              got.every(
                (v) =>
                  v.resource.identifier === id && v.resource.version === v.version && v.resource.updatedAt === v.at,
              ),
            ).toBe(true);
            const range = { ...(since !== undefined ? { since } : {}), ...(until !== undefined ? { until } : {}) };
            const cut = await allPages(store, id, limit, range);
            expect(cut.map(shape)).toEqual(
              want.filter((v) => (since === undefined || v.at >= since) && (until === undefined || v.at < until)),
            );
          }
        },
      ),
      { numRuns: backend().kind === "postgres" ? 25 : 40 },
    );
  }, 600_000);

  it("refuses a cursor of another identifier or range, and a limit below 1", async () => {
    const { store } = backend();
    const p = uid("hc");
    const caller = { actor: "x", grants: ALL_GRANTS };
    await store.create(caller, [study(`${p}a`, null), study(`${p}b`, null)]);
    await store.update(caller, [[`${p}a`, { license: "MIT" }]]);
    await store.update(caller, [[`${p}b`, { license: "MIT" }]]);
    const page = await store.history(`${p}a`, ALL_GRANTS, { limit: 1 });
    expect(page.versions.map((v) => v.kind)).toEqual(["created"]);
    const cursor = page.nextCursor as string;
    expect((await store.history(`${p}a`, ALL_GRANTS, { limit: 1, cursor })).versions.map((v) => v.kind)).toEqual([
      "updated",
    ]);
    await expect(store.history(`${p}b`, ALL_GRANTS, { limit: 1, cursor })).rejects.toMatchObject({ code: 3 });
    await expect(
      store.history(`${p}a`, ALL_GRANTS, { limit: 1, cursor, since: page.versions[0]?.at as string }),
    ).rejects.toMatchObject({ code: 3 });
    await expect(
      store.history(`${p}a`, ALL_GRANTS, { limit: 1, cursor: `${cursor.slice(0, -2)}AA` }),
    ).rejects.toMatchObject({ code: 3 });
    await expect(store.history(`${p}a`, ALL_GRANTS, { limit: 0 })).rejects.toMatchObject({ code: 3 });
  });
});
