// Model-based: random sequences of batches (valid and invalid) against the
// store and an in-memory model; then every read at random as_of points
// (each commit stamp, +/- 1 microsecond, before the first and after the
// last write) must match the model's state at that point.
import { ConnectError } from "@connectrpc/connect";
import fc from "fast-check";
import { expect, it } from "vitest";
import type { ResourcePatch, ResourceStore } from "../../src/store/index.js";
import { describeBackends, uid } from "./backends.js";
import { fromMicros, micros } from "./helpers.js";
import { apply, readModel, type Batch, type Outcome, type State } from "./model.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

const POOL = ["a", "b", "c", "d", "e", "f"];
const id = fc.constantFrom(...POOL);
const parent = fc.option(id, { nil: null, freq: 3 });

const batchArb: fc.Arbitrary<Batch> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant("create" as const),
      items: fc.array(fc.record({ id, parent, name: fc.constantFrom("n1", "n2") }), { maxLength: 3 }),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant("update" as const),
      entries: fc.uniqueArray(
        fc.record(
          {
            id,
            parent,
            license: fc.constantFrom(null, "MIT", "CC0"),
            name: fc.constantFrom("n1", "n3", null),
            payloadType: fc.constantFrom("datasource", "study"),
            isDeleted: fc.boolean(),
          },
          { requiredKeys: ["id"] },
        ),
        { minLength: 1, maxLength: 3, selector: (e) => e.id },
      ),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("delete" as const),
      ids: fc.array(id, { maxLength: 2 }),
      cascade: fc.boolean(),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("restore" as const),
      ids: fc.array(id, { maxLength: 2 }),
      cascade: fc.boolean(),
    }),
  },
);

async function run(store: ResourceStore, p: string, batch: Batch): Promise<{ outcome: Outcome; at?: string }> {
  const q = (x: string | null | undefined) => (x === null || x === undefined ? x : `${p}${x}`);
  try {
    let res;
    switch (batch.kind) {
      case "create":
        res = await store.create(
          LOCAL_CALLER,
          batch.items.map((i) => ({
            identifier: `${p}${i.id}`,
            payloadType: "datasource",
            parentIdentifier: q(i.parent) ?? null,
            payload: { name: i.name },
          })),
        );
        break;
      case "update":
        res = await store.update(
          LOCAL_CALLER,
          batch.entries.map((e) => {
            const patch: ResourcePatch = {};
            if (e.parent !== undefined) patch.parentIdentifier = q(e.parent) ?? null;
            if (e.license !== undefined) patch.license = e.license;
            if (e.name !== undefined) patch.payload = { name: e.name };
            if (e.payloadType !== undefined) patch.payloadType = e.payloadType;
            if (e.isDeleted !== undefined) patch.isDeleted = e.isDeleted;
            return [`${p}${e.id}`, patch] as const;
          }),
        );
        break;
      case "delete":
        res = await store.delete(
          LOCAL_CALLER,
          batch.ids.map((i) => `${p}${i}`),
          { cascade: batch.cascade },
        );
        break;
      case "restore":
        res = await store.restore(
          LOCAL_CALLER,
          batch.ids.map((i) => `${p}${i}`),
          { cascade: batch.cascade },
        );
        break;
    }
    return { outcome: { ok: true, count: res.count }, at: res.at };
  } catch (err) {
    if (!(err instanceof ConnectError)) throw err;
    return { outcome: { ok: false, code: err.code } };
  }
}

function prefixed(p: string, rows: ReturnType<typeof readModel>) {
  return rows.map((r) => ({
    ...r,
    identifier: `${p}${r.identifier}`,
    parentIdentifier: r.parentIdentifier === null ? null : `${p}${r.parentIdentifier}`,
    children: r.children.map((c) => `${p}${c}`),
  }));
}

describeBackends("model-based sequences", (backend) => {
  it("matches the model at every commit, +/- 1 microsecond, before the first and after the last write", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(batchArb, { minLength: 1, maxLength: 12 }), async (batches) => {
        const { store } = backend();
        const p = uid("m");
        let state: State = new Map();
        const history: { at: string; state: State }[] = [];
        for (const batch of batches) {
          const { outcome, at } = await run(store, p, batch);
          // The model needs the stamp; an error leaves nothing to stamp.
          const predicted = apply(state, batch, at ?? "");
          expect(outcome, JSON.stringify(batch)).toEqual(predicted.outcome);
          if (outcome.ok && at !== undefined) {
            const last = history.at(-1);
            if (last) expect(micros(at) > micros(last.at)).toBe(true);
            state = predicted.next;
            history.push({ at, state });
          }
        }
        const ids = POOL.map((x) => `${p}${x}`);
        const stateAt = (us: bigint): State => {
          let s: State = new Map();
          for (const h of history) if (micros(h.at) <= us) s = h.state;
          return s;
        };
        const points = new Set<bigint>();
        for (const h of history) for (const d of [-1n, 0n, 1n]) points.add(micros(h.at) + d);
        if (history.length > 0) {
          points.add(micros(history[0]!.at) - 1_000_000n);
          points.add(micros(history.at(-1)!.at) + 3_600_000_000n);
        }
        for (const us of points) {
          const got = await store.read(ALL_GRANTS, ids, { asOf: fromMicros(us) });
          expect(got, `as_of ${fromMicros(us)}`).toEqual(prefixed(p, readModel(stateAt(us), POOL)));
        }
        expect(await store.read(ALL_GRANTS, ids)).toEqual(prefixed(p, readModel(state, POOL)));
      }),
      { numRuns: Number(process.env.MODEL_RUNS ?? 40) },
    );
  });
});
