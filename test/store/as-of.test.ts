import { expect, it } from "vitest";
import { parseAsOf } from "../../src/time.js";
import { describeBackends, uid } from "./backends.js";
import { ds, fromMicros, micros, study, TS_PATTERN } from "./helpers.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

describeBackends("as_of reads", (backend) => {
  const s = () => backend().store;

  it("a version stamped t is visible at t and not a microsecond earlier", async () => {
    const p = uid();
    const c = await s().create(LOCAL_CALLER, [ds(`${p}a`)]);
    expect(c.at).toMatch(TS_PATTERN);
    const u = await s().update(LOCAL_CALLER, [[`${p}a`, { license: "MIT" }]]);
    expect(micros(u.at) > micros(c.at)).toBe(true);
    const at = (us: bigint) => s().read(ALL_GRANTS, [`${p}a`], { asOf: fromMicros(us) });
    expect(await at(micros(c.at) - 1n)).toEqual([]);
    expect((await at(micros(c.at)))[0]).toMatchObject({ version: 1, license: null });
    expect((await at(micros(u.at) - 1n))[0]).toMatchObject({ version: 1, license: null });
    expect((await at(micros(u.at)))[0]).toMatchObject({ version: 2, license: "MIT", updatedAt: u.at });
  });

  it("tombstones, parents and children are read as they were", async () => {
    const p = uid();
    const c = await s().create(LOCAL_CALLER, [ds(`${p}r1`), ds(`${p}r2`), study(`${p}x`, `${p}r1`)]);
    const moved = await s().update(LOCAL_CALLER, [[`${p}x`, { parentIdentifier: `${p}r2` }]]);
    const gone = await s().delete(LOCAL_CALLER, [`${p}r2`]);
    const read = (asOf: string) => s().read(ALL_GRANTS, [`${p}r1`, `${p}r2`, `${p}x`], { asOf });
    expect((await read(c.at)).map((r) => [r.identifier, r.parentIdentifier, r.children])).toEqual([
      [`${p}r1`, null, [`${p}x`]],
      [`${p}r2`, null, []],
      [`${p}x`, `${p}r1`, []],
    ]);
    expect((await read(moved.at)).map((r) => [r.identifier, r.children])).toEqual([
      [`${p}r1`, []],
      [`${p}r2`, [`${p}x`]],
      [`${p}x`, []],
    ]);
    // the cascade took x with r2
    expect((await read(gone.at)).map((r) => [r.identifier, r.children])).toEqual([[`${p}r1`, []]]);
    expect((await read(moved.at)).length).toBe(3);
  });

  it("before any data is empty; the future reads now; offsets and extra digits name the same instant", async () => {
    const p = uid();
    const c = await s().create(LOCAL_CALLER, [ds(`${p}a`)]);
    expect(await s().read(ALL_GRANTS, [`${p}a`], { asOf: parseAsOf("1999-01-01T00:00:00Z") })).toEqual([]);
    const now = await s().read(ALL_GRANTS, [`${p}a`]);
    expect(await s().read(ALL_GRANTS, [`${p}a`], { asOf: parseAsOf("2999-12-31T23:59:59.999999999Z") })).toEqual(now);
    // c.at as 1 h ahead in a +01:00 zone, with 9 fractional digits (the extra ones truncated)
    const us = micros(c.at);
    const shifted = fromMicros(us + 3_600_000_000n).replace("Z", "999+01:00");
    expect(await s().read(ALL_GRANTS, [`${p}a`], { asOf: parseAsOf(shifted) })).toEqual(now);
    const before = fromMicros(us - 1n + 3_600_000_000n).replace("Z", "999+01:00");
    expect(await s().read(ALL_GRANTS, [`${p}a`], { asOf: parseAsOf(before) })).toEqual([]);
  });

  it("a read without as_of answers the same as one at the last commit", async () => {
    const p = uid();
    await s().create(LOCAL_CALLER, [ds(`${p}a`), study(`${p}b`, `${p}a`), study(`${p}c`, `${p}a`)]);
    const last = await s().delete(LOCAL_CALLER, [`${p}c`]);
    expect(await s().read(ALL_GRANTS, [`${p}a`, `${p}b`, `${p}c`], { asOf: last.at })).toEqual(
      await s().read(ALL_GRANTS, [`${p}a`, `${p}b`, `${p}c`]),
    );
  });
});
