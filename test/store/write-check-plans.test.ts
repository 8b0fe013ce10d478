// The walks every write runs inside its transaction (the tree check of a
// create, an update and a restore; the subtree walks of a cascading delete
// and restore) must cost what the batch touches, not what the table holds.
// With `identifier = ANY($1)` over a batch of 1,000 and plain joins in the
// recursive steps, the planner chose sequential scans of `resources` (hash
// joins), repeated at every step, so every batch read the whole table
// several times and writes slowed down as the store grew (docs/benchmarks/create.md, "the tree checks of every write"). Each
// walking statement of such writes is explained here against a table of a
// few thousand rows, and none may scan a resource table.
import { expect, it } from "vitest";
import type { Db, NewResource } from "../../src/store/index.js";
import { createResourceStore } from "../../src/store/index.js";
import { describeBackends, uid } from "./backends.js";
import { recording, type Recorded } from "./recording.js";
import { LOCAL_CALLER } from "../../src/access/index.js";

const file = (identifier: string, parent: string): NewResource => ({
  identifier,
  payloadType: "annotation",
  parentIdentifier: parent,
  payload: { label: "x" },
});
const series = (identifier: string): NewResource => ({
  identifier,
  payloadType: "annotation",
  payload: { label: "s" },
});

/** A batch like an upload: 10 parents, each with `each` children, all new. */
function upload(p: string, each: number): NewResource[] {
  const out: NewResource[] = [];
  for (let s = 0; s < 10; s++) out.push(series(`${p}-s${s}`));
  for (let s = 0; s < 10; s++) for (let f = 0; f < each; f++) out.push(file(`${p}-s${s}-f${f}`, `${p}-s${s}`));
  return out;
}

async function plansOf(db: Db, statements: readonly Recorded[]): Promise<string[]> {
  const plans: string[] = [];
  for (const s of statements) {
    // The walks: a scan there is repeated at every step of the recursion.
    if (!/^\s*WITH RECURSIVE/i.test(s.sql)) continue;
    const { rows } = await db.query<{ "QUERY PLAN": string }>(`EXPLAIN (COSTS OFF) ${s.sql}`, s.params);
    plans.push(rows.map((r) => r["QUERY PLAN"]).join("\n"));
  }
  return plans;
}

describeBackends("write checks use the keys, not a scan", (backend) => {
  it("a create of 1,000 and an update re-parenting 500 explain without a sequential scan of the resource tables", async () => {
    const { db } = backend();
    const store = createResourceStore(db);
    // A table several times the batch, with statistics, as a store has after a while.
    for (let i = 0; i < 4; i++) await store.create(LOCAL_CALLER, upload(uid("fill"), 99));
    await db.exec("ANALYZE resources; ANALYZE resource_versions");

    const created: Recorded[] = [];
    const p = uid("up");
    await createResourceStore(recording(db, created)).create(LOCAL_CALLER, upload(p, 99));
    const updated: Recorded[] = [];
    const moves = Array.from(
      { length: 500 },
      (_, i) => [`${p}-s${i % 10}-f${Math.floor(i / 10)}`, { parentIdentifier: `${p}-s${(i + 1) % 10}` }] as const,
    );
    expect((await createResourceStore(recording(db, updated)).update(LOCAL_CALLER, moves)).count).toBe(500);

    const plans = [...(await plansOf(db, created)), ...(await plansOf(db, updated))];
    // The create's tree check and attribution upkeep (access), and the update's.
    expect(plans.length).toBe(4);
    for (const plan of plans) expect(plan).not.toMatch(/Seq Scan on resource(s|_versions)\b/);
  }, 120_000);

  it("a cascading delete of an upload and its restore explain without a sequential scan of the resource tables", async () => {
    const { db } = backend();
    const store = createResourceStore(db);
    for (let i = 0; i < 4; i++) await store.create(LOCAL_CALLER, upload(uid("fill"), 99));
    const p = uid("del");
    await store.create(LOCAL_CALLER, upload(p, 99));
    await db.exec("ANALYZE resources; ANALYZE resource_versions");
    const series = Array.from({ length: 10 }, (_, s) => `${p}-s${s}`);
    const files = Array.from({ length: 10 }, (_, s) => Array.from({ length: 99 }, (_, f) => `${p}-s${s}-f${f}`)).flat();

    const written: Recorded[] = [];
    const recorded = createResourceStore(recording(db, written));
    expect((await recorded.delete(LOCAL_CALLER, series, { cascade: true })).count).toBe(1000);
    expect((await recorded.restore(LOCAL_CALLER, series, { cascade: true })).count).toBe(1000);
    expect((await recorded.delete(LOCAL_CALLER, files)).count).toBe(990);
    expect((await recorded.restore(LOCAL_CALLER, files)).count).toBe(990);

    const plans = await plansOf(db, written);
    // Each delete's walk (and write), each restore's walk (and write) and its tree check.
    expect(plans.length).toBe(6);
    for (const plan of plans) expect(plan).not.toMatch(/Seq Scan on resource(s|_versions)\b/);
  }, 120_000);
});
