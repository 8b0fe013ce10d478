// Optimistic concurrency (docs/contract/19-audit-history.md): an update's
// expected_version and a delete's or restore's expected_versions refuse the
// whole batch (aborted, VERSION_MISMATCH, naming the identifiers) when the
// stored version differs, with nothing written. On PostgreSQL two updaters
// that both saw version v race: exactly one wins, every time.
import { Code, ConnectError } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { ALL_GRANTS } from "../../src/access/index.js";
import { reasonOf } from "../../src/errors.js";
import { describeBackends, uid } from "../store/backends.js";
import { study } from "../store/helpers.js";

const A = { actor: "a", grants: ALL_GRANTS };
const B = { actor: "b", grants: ALL_GRANTS };

async function refusal(
  p: Promise<unknown>,
): Promise<{ code: Code; reason: string; identifiers: string | undefined } | "ok"> {
  try {
    await p;
    return "ok";
  } catch (err) {
    if (!(err instanceof ConnectError)) throw err;
    return { code: err.code, reason: reasonOf(err), identifiers: err.message.split(": ")[1] };
  }
}

describeBackends("expected versions", (backend) => {
  it("an update, delete or restore with a stale version writes nothing", async () => {
    const { store, db } = backend();
    const p = uid("ev");
    await store.create(A, [study(`${p}r`, null), study(`${p}c`, `${p}r`), study(`${p}x`, null)]);
    await store.update(A, [[`${p}r`, { license: "MIT" }]]); // r at 2
    const count = async () =>
      (
        await db.query<{ n: string }>("SELECT count(*)::text AS n FROM resource_history WHERE identifier LIKE $1", [
          `${p}%`,
        ])
      ).rows[0]?.n;
    const before = await count();
    // The batch names a good and a stale item: nothing of it is written.
    const stale = await refusal(
      store.update(B, [
        [`${p}x`, { license: "CC0", expectedVersion: 1 }],
        [`${p}r`, { license: "CC0", expectedVersion: 1 }],
      ]),
    );
    expect(stale).toEqual({ code: Code.Aborted, reason: "VERSION_MISMATCH", identifiers: `${p}r` });
    expect(await refusal(store.delete(B, [`${p}r`], { expectedVersions: new Map([[`${p}r`, 1]]) }))).toMatchObject({
      code: Code.Aborted,
      reason: "VERSION_MISMATCH",
    });
    // An identifier never created has no version: it differs too.
    expect(await refusal(store.delete(B, [`${p}r`], { expectedVersions: new Map([[`${p}nope`, 1]]) }))).toMatchObject({
      reason: "VERSION_MISMATCH",
    });
    expect(await count()).toBe(before);
    expect(
      (await store.read(ALL_GRANTS, [`${p}x`, `${p}r`], { excludeChildren: true })).map((r) => [r.license, r.version]),
    ).toEqual([
      [null, 1],
      ["MIT", 2],
    ]);
    // The right versions go through.
    expect((await store.update(B, [[`${p}r`, { license: "CC0", expectedVersion: 2 }]])).count).toBe(1);
    expect(
      (
        await store.delete(B, [`${p}r`], {
          expectedVersions: new Map([
            [`${p}r`, 3],
            [`${p}c`, 1],
          ]),
        })
      ).count,
    ).toBe(2);
    expect(await refusal(store.restore(B, [`${p}r`], { expectedVersions: new Map([[`${p}r`, 3]]) }))).toMatchObject({
      reason: "VERSION_MISMATCH",
    });
    expect((await store.restore(B, [`${p}r`], { expectedVersions: new Map([[`${p}r`, 4]]) })).count).toBe(2);
    expect(await refusal(store.update(B, [[`${p}r`, { license: "x", expectedVersion: 0 }]]))).toMatchObject({
      code: Code.InvalidArgument,
    });
  });
});

describeBackends(
  "expected_version under concurrent updaters",
  (backend) => {
    it("of two updaters that saw the same version, exactly one wins (200 races)", async () => {
      const { store } = backend();
      const p = uid("race");
      const ids = Array.from({ length: 200 }, (_, i) => `${p}-${i}`);
      await store.create(
        A,
        ids.map((id) => study(id, null)),
      );
      let aWins = 0;
      for (const id of ids) {
        const [a, b] = await Promise.all([
          refusal(store.update(A, [[id, { license: "A", expectedVersion: 1 }]])),
          refusal(store.update(B, [[id, { license: "B", expectedVersion: 1 }]])),
        ]);
        const outcomes = [a, b];
        expect(outcomes.filter((o) => o === "ok")).toHaveLength(1);
        expect(outcomes.filter((o) => o !== "ok")).toEqual([
          { code: Code.Aborted, reason: "VERSION_MISMATCH", identifiers: id },
        ]);
        const h = await store.history(id, ALL_GRANTS);
        const winner = a === "ok" ? "a" : "b";
        if (winner === "a") aWins++;
        expect(h.versions.map((v) => [v.version, v.actor, v.resource.license])).toEqual([
          [1, "a", null],
          [2, winner, winner.toUpperCase()],
        ]);
      }
      // Both sides won sometimes: the two really raced.
      expect(aWins).toBeGreaterThan(0);
      expect(aWins).toBeLessThan(ids.length);
    }, 300_000);
  },
  ["postgres"],
);
