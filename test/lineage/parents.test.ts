import { Code } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { uid } from "../store/backends.js";
import { ds, expectCode, fromMicros, micros, study } from "../store/helpers.js";
import { describeServices } from "./harness.js";
import { LOCAL_CALLER } from "../../src/access/index.js";

describeServices("GET /parents/{identifier}", (svc) => {
  const store = () => svc().backend.store;
  const parents = async (identifier: string, asOf?: string) =>
    (await svc().lineage.parents({ identifier, ...(asOf !== undefined ? { asOf } : {}) })).identifiers;

  it("answers the chain nearest first, itself excluded, on both revisions", async () => {
    const p = uid();
    await store().create(LOCAL_CALLER, [
      ds(`${p}a`),
      study(`${p}b`, `${p}a`),
      study(`${p}c`, `${p}b`),
      study(`${p}d`, `${p}c`),
    ]);
    expect(await parents(`${p}d`)).toEqual([`${p}c`, `${p}b`, `${p}a`]);
    expect(await parents(`${p}a`)).toEqual([]);
    expect((await svc().lineageV2.parents({ identifier: `${p}d` })).identifiers).toEqual([`${p}c`, `${p}b`, `${p}a`]);
  });

  it("includes tombstoned ancestors, and is 404 for a resource that is not active", async () => {
    const p = uid();
    await store().create(LOCAL_CALLER, [ds(`${p}a`), study(`${p}b`, `${p}a`), study(`${p}c`, `${p}b`)]);
    await store().delete(LOCAL_CALLER, [`${p}b`], { cascade: false });
    expect(await parents(`${p}c`)).toEqual([`${p}b`, `${p}a`]);
    await expectCode(parents(`${p}b`), Code.NotFound);
    await expectCode(parents(`${p}nowhere`), Code.NotFound);
    await expectCode(parents("bad id"), Code.InvalidArgument);
    await expectCode(parents(`${p}c`, "2026-13-01T00:00:00Z"), Code.InvalidArgument);
  });

  it("is exact at any as_of", async () => {
    const p = uid();
    const t1 = (
      await store().create(LOCAL_CALLER, [ds(`${p}a`), ds(`${p}b`), study(`${p}s`, `${p}a`), study(`${p}t`, `${p}s`)])
    ).at;
    const t2 = (await store().update(LOCAL_CALLER, [[`${p}s`, { parentIdentifier: `${p}b` }]])).at;
    const t3 = (await store().delete(LOCAL_CALLER, [`${p}t`])).at;
    expect(await parents(`${p}t`, fromMicros(micros(t1) + 1n))).toEqual([`${p}s`, `${p}a`]);
    expect(await parents(`${p}t`, fromMicros(micros(t2) - 1n))).toEqual([`${p}s`, `${p}a`]);
    expect(await parents(`${p}t`, t2)).toEqual([`${p}s`, `${p}b`]);
    await expectCode(parents(`${p}t`, fromMicros(micros(t1) - 1n)), Code.NotFound);
    await expectCode(parents(`${p}t`, t3), Code.NotFound);
    await expectCode(parents(`${p}t`), Code.NotFound);
    expect(await parents(`${p}s`)).toEqual([`${p}b`]);
  });
});
