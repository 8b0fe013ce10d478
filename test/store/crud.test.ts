import { Code } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { describeBackends, uid } from "./backends.js";
import { ds, expectCode, micros, study, TS_PATTERN } from "./helpers.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

describeBackends("create, read, update, delete, restore", (backend) => {
  const s = () => backend().store;

  it("creates a batch and reads it back with metadata defaults, in input order with repeats", async () => {
    const p = uid();
    const res = await s().create(LOCAL_CALLER, [
      ds(`${p}a`),
      {
        identifier: `${p}f`,
        payloadType: "file",
        parentIdentifier: `${p}a`,
        license: "CC-BY-4.0",
        accessLevel: "public",
        derivedFrom: [`${p}a`],
        payload: { path: "s3://b/k", size_bytes: "9007199254740993" },
      },
    ]);
    expect(res.count).toBe(2);
    const read = await s().read(ALL_GRANTS, [`${p}f`, `${p}missing`, `${p}a`, `${p}f`]);
    expect(read.map((r) => r.identifier)).toEqual([`${p}f`, `${p}a`, `${p}f`]);
    const [f, a] = read;
    expect(a).toMatchObject({
      payloadType: "datasource",
      parentIdentifier: null,
      license: null,
      accessLevel: "internal",
      derivedFrom: [],
      version: 1,
      children: [`${p}f`],
    });
    expect(f).toMatchObject({
      parentIdentifier: `${p}a`,
      license: "CC-BY-4.0",
      accessLevel: "public",
      derivedFrom: [`${p}a`],
      children: [],
    });
    // int64 keeps every digit, as a decimal string (proto3 JSON)
    expect(f?.payload).toEqual({ path: "s3://b/k", size_bytes: "9007199254740993" });
    expect(f?.createdAt).toMatch(TS_PATTERN);
    expect(f?.createdAt).toBe(f?.updatedAt);
  });

  it("an empty batch is valid and counts 0", async () => {
    expect((await s().create(LOCAL_CALLER, [])).count).toBe(0);
    expect((await s().update(LOCAL_CALLER, [])).count).toBe(0);
    expect((await s().delete(LOCAL_CALLER, [])).count).toBe(0);
    expect(await s().read(ALL_GRANTS, [])).toEqual([]);
  });

  it("accepts parents inside the same batch in any order", async () => {
    const p = uid();
    await s().create(LOCAL_CALLER, [study(`${p}c`, `${p}b`), study(`${p}b`, `${p}a`), ds(`${p}a`)]);
    const [a, b] = await s().read(ALL_GRANTS, [`${p}a`, `${p}b`]);
    expect(a?.children).toEqual([`${p}b`]);
    expect(b?.children).toEqual([`${p}c`]);
  });

  it("refuses duplicates, active identifiers, dangling parents and in-batch cycles, writing nothing", async () => {
    const p = uid();
    await s().create(LOCAL_CALLER, [ds(`${p}a`)]);
    await expectCode(s().create(LOCAL_CALLER, [ds(`${p}x`), ds(`${p}x`)]), Code.InvalidArgument);
    await expectCode(s().create(LOCAL_CALLER, [ds(`${p}y`), ds(`${p}a`)]), Code.FailedPrecondition);
    await expectCode(s().create(LOCAL_CALLER, [ds(`${p}z`), study(`${p}s`, `${p}nowhere`)]), Code.FailedPrecondition);
    await expectCode(
      s().create(LOCAL_CALLER, [study(`${p}c1`, `${p}c2`), study(`${p}c2`, `${p}c1`)]),
      Code.FailedPrecondition,
    );
    await expectCode(s().create(LOCAL_CALLER, [study(`${p}self`, `${p}self`)]), Code.InvalidArgument);
    expect(await s().read(ALL_GRANTS, [`${p}x`, `${p}y`, `${p}z`, `${p}s`, `${p}c1`, `${p}c2`, `${p}self`])).toEqual(
      [],
    );
    const [a] = await s().read(ALL_GRANTS, [`${p}a`]);
    expect(a?.version).toBe(1);
  });

  it("refuses malformed input with invalid_argument", async () => {
    const p = uid();
    const bad = [
      { ...ds(`${p}1`), identifier: "-bad" },
      { ...ds(`${p}2`), payloadType: "nope" },
      { ...ds(`${p}3`), payload: { name: "x", colour: "red" } },
      { ...ds(`${p}4`), payload: {} },
      { ...ds(`${p}5`), payload: { name: 5 } },
      { ...ds(`${p}6`), payload: { name: "x", country: "nl" } },
      { ...ds(`${p}7`), accessLevel: "secret" },
      { ...ds(`${p}8`), derivedFrom: ["ok", "not ok"] },
      { identifier: `${p}9`, payloadType: "study", payload: { study_date: "2023-02-29" } },
      { identifier: `${p}10`, payloadType: "file", payload: { path: "s3://b/k", sha256: "ABC" } },
      { identifier: `${p}11`, payloadType: "artefact", payload: { repo: "r", branch: "b", path: "p", status: "done" } },
    ];
    for (const item of bad) await expectCode(s().create(LOCAL_CALLER, [ds(`${p}ok`), item]), Code.InvalidArgument);
    expect(await s().read(ALL_GRANTS, [`${p}ok`])).toEqual([]);
  });

  it("creating over a tombstone keeps history, takes a new created_at and continues the version", async () => {
    const p = uid();
    const first = await s().create(LOCAL_CALLER, [ds(`${p}a`)]);
    const del = await s().delete(LOCAL_CALLER, [`${p}a`]);
    const again = await s().create(LOCAL_CALLER, [{ ...ds(`${p}a`), payload: { name: "second" } }]);
    const [now] = await s().read(ALL_GRANTS, [`${p}a`]);
    expect(now?.version).toBe(3);
    expect(now?.createdAt).toBe(again.at);
    expect(micros(now!.createdAt) > micros(first.at)).toBe(true);
    expect(now?.payload).toEqual({ name: "second" });
    const [old] = await s().read(ALL_GRANTS, [`${p}a`], { asOf: first.at });
    expect(old?.payload).toEqual({ name: `name of ${p}a` });
    expect(old?.createdAt).toBe(first.at);
    expect(await s().read(ALL_GRANTS, [`${p}a`], { asOf: del.at })).toEqual([]);
  });

  it("update changes only the keys present; null clears; derived_from replaces; version and updated_at move", async () => {
    const p = uid();
    const c = await s().create(LOCAL_CALLER, [
      ds(`${p}a`),
      {
        identifier: `${p}f`,
        payloadType: "file",
        license: "MIT",
        derivedFrom: ["x1", "x2"],
        payload: { path: "s3://b/k", content_type: "text/plain", size_bytes: 3 },
      },
    ]);
    const u = await s().update(LOCAL_CALLER, [
      [`${p}f`, { license: null, derivedFrom: ["x3"], payload: { content_type: null, size_bytes: "12" } }],
    ]);
    expect(u.count).toBe(1);
    const [f] = await s().read(ALL_GRANTS, [`${p}f`]);
    expect(f).toMatchObject({
      license: null,
      derivedFrom: ["x3"],
      accessLevel: "internal",
      version: 2,
      createdAt: c.at,
      updatedAt: u.at,
    });
    expect(f?.payload).toEqual({ path: "s3://b/k", size_bytes: "12" });
  });

  it("update refusals: unknown identifier, payload_type change, unknown field, required null, tombstoned, cycles", async () => {
    const p = uid();
    await s().create(LOCAL_CALLER, [ds(`${p}a`), study(`${p}b`, `${p}a`), study(`${p}c`, `${p}b`), ds(`${p}gone`)]);
    await s().delete(LOCAL_CALLER, [`${p}gone`]);
    const cases: [Parameters<ReturnType<typeof s>["update"]>[1], Code][] = [
      [
        [
          [`${p}a`, { license: "x" }],
          [`${p}nope`, { license: "y" }],
        ],
        Code.FailedPrecondition,
      ],
      [[[`${p}a`, { payloadType: "study" }]], Code.FailedPrecondition],
      [[[`${p}a`, { payload: { modality: "CT" } }]], Code.InvalidArgument],
      [[[`${p}a`, { payload: { name: null } }]], Code.InvalidArgument],
      [[[`${p}gone`, { license: "x" }]], Code.FailedPrecondition],
      [[[`${p}a`, { parentIdentifier: `${p}a` }]], Code.InvalidArgument],
      [[[`${p}a`, { parentIdentifier: `${p}c` }]], Code.FailedPrecondition],
      [[[`${p}c`, { parentIdentifier: `${p}gone` }]], Code.FailedPrecondition],
      [[[`${p}c`, { parentIdentifier: `${p}missing` }]], Code.FailedPrecondition],
      [[[`${p}a`, { accessLevel: null }]], Code.InvalidArgument],
    ];
    for (const [batch, code] of cases) await expectCode(s().update(LOCAL_CALLER, batch), code);
    const rows = await s().read(ALL_GRANTS, [`${p}a`, `${p}b`, `${p}c`]);
    expect(rows.map((r) => [r.version, r.license, r.parentIdentifier])).toEqual([
      [1, null, null],
      [1, null, `${p}a`],
      [1, null, `${p}b`],
    ]);
  });

  it("re-parents, and the children lists follow (oldest first, ties by identifier)", async () => {
    const p = uid();
    await s().create(LOCAL_CALLER, [ds(`${p}r1`), ds(`${p}r2`)]);
    await s().create(LOCAL_CALLER, [study(`${p}z`, `${p}r1`), study(`${p}m`, `${p}r1`)]);
    await s().create(LOCAL_CALLER, [study(`${p}a`, `${p}r1`)]);
    expect((await s().read(ALL_GRANTS, [`${p}r1`]))[0]?.children).toEqual([`${p}m`, `${p}z`, `${p}a`]);
    expect((await s().update(LOCAL_CALLER, [[`${p}m`, { parentIdentifier: `${p}r2` }]])).count).toBe(1);
    const [r1, r2] = await s().read(ALL_GRANTS, [`${p}r1`, `${p}r2`]);
    expect(r1?.children).toEqual([`${p}z`, `${p}a`]);
    expect(r2?.children).toEqual([`${p}m`]);
    expect((await s().read(ALL_GRANTS, [`${p}r1`], { excludeChildren: true }))[0]?.children).toBeUndefined();
    // a cycle through others: r2 under m (m is r2's child)
    await expectCode(s().update(LOCAL_CALLER, [[`${p}r2`, { parentIdentifier: `${p}m` }]]), Code.FailedPrecondition);
  });

  it("is_deleted tombstones just that resource and false restores it; other changes to a tombstone need it", async () => {
    const p = uid();
    await s().create(LOCAL_CALLER, [ds(`${p}a`), study(`${p}b`, `${p}a`)]);
    expect((await s().update(LOCAL_CALLER, [[`${p}a`, { isDeleted: true }]])).count).toBe(1);
    expect((await s().read(ALL_GRANTS, [`${p}a`, `${p}b`])).map((r) => r.identifier)).toEqual([`${p}b`]);
    expect((await s().update(LOCAL_CALLER, [[`${p}a`, { isDeleted: true }]])).count).toBe(0);
    await expectCode(s().update(LOCAL_CALLER, [[`${p}a`, { license: "L" }]]), Code.FailedPrecondition);
    expect((await s().update(LOCAL_CALLER, [[`${p}a`, { isDeleted: false, license: "L" }]])).count).toBe(1);
    const [a] = await s().read(ALL_GRANTS, [`${p}a`]);
    expect(a).toMatchObject({ license: "L", version: 3, children: [`${p}b`] });
  });

  it("delete with and without cascade counts what it newly tombstones", async () => {
    const p = uid();
    await s().create(LOCAL_CALLER, [
      ds(`${p}a`),
      study(`${p}b`, `${p}a`),
      study(`${p}c`, `${p}b`),
      study(`${p}d`, `${p}a`),
    ]);
    expect((await s().delete(LOCAL_CALLER, [`${p}b`], { cascade: false })).count).toBe(1);
    expect((await s().read(ALL_GRANTS, [`${p}c`])).length).toBe(1);
    expect((await s().delete(LOCAL_CALLER, [`${p}b`, `${p}nope`])).count).toBe(0);
    // the walk stops at the tombstoned b, so its active child c stays
    expect((await s().delete(LOCAL_CALLER, [`${p}a`, `${p}a`])).count).toBe(2);
    expect((await s().read(ALL_GRANTS, [`${p}a`, `${p}b`, `${p}c`, `${p}d`])).map((r) => r.identifier)).toEqual([
      `${p}c`,
    ]);
  });

  it("restore with cascade undoes exactly the subtree of that delete", async () => {
    const p = uid();
    await s().create(LOCAL_CALLER, [
      ds(`${p}a`),
      study(`${p}b`, `${p}a`),
      study(`${p}c`, `${p}b`),
      study(`${p}d`, `${p}b`),
      study(`${p}e`, `${p}a`),
    ]);
    await s().delete(LOCAL_CALLER, [`${p}d`]); // an earlier, separate delete
    expect((await s().delete(LOCAL_CALLER, [`${p}a`])).count).toBe(4);
    expect((await s().restore(LOCAL_CALLER, [`${p}a`, `${p}nope`])).count).toBe(4);
    const ids = (await s().read(ALL_GRANTS, [`${p}a`, `${p}b`, `${p}c`, `${p}d`, `${p}e`])).map((r) => r.identifier);
    expect(ids).toEqual([`${p}a`, `${p}b`, `${p}c`, `${p}e`]);
    expect((await s().restore(LOCAL_CALLER, [`${p}a`])).count).toBe(0);
  });

  it("restore named on a descendant restores it and its part of the same delete; without cascade only itself", async () => {
    const p = uid();
    await s().create(LOCAL_CALLER, [
      ds(`${p}a`),
      study(`${p}b`, `${p}a`),
      study(`${p}c`, `${p}b`),
      study(`${p}e`, `${p}a`),
    ]);
    await s().delete(LOCAL_CALLER, [`${p}a`]);
    expect((await s().restore(LOCAL_CALLER, [`${p}b`])).count).toBe(2);
    expect((await s().read(ALL_GRANTS, [`${p}a`, `${p}b`, `${p}c`, `${p}e`])).map((r) => r.identifier)).toEqual([
      `${p}b`,
      `${p}c`,
    ]);
    expect((await s().restore(LOCAL_CALLER, [`${p}a`], { cascade: false })).count).toBe(1);
    expect((await s().read(ALL_GRANTS, [`${p}a`, `${p}e`])).map((r) => r.identifier)).toEqual([`${p}a`]);
    const [a] = await s().read(ALL_GRANTS, [`${p}a`]);
    expect(a?.version).toBe(3);
    expect(a?.children).toEqual([`${p}b`]);
  });
});
