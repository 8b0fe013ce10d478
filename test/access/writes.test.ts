// docs/contract/18-access.md for writes, the registry, artefacts and object paths,
// both backends: a write may touch only what the caller may see, before and
// after; what it may not see answers as unknown; nothing is written on a
// refusal.
import { callerWith } from "../support/caller.js";
import { randomBytes } from "node:crypto";
import { Code } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { ALL_GRANTS, grantsOf, type Grants, LOCAL_CALLER } from "../../src/access/index.js";
import { reasonOf } from "../../src/errors.js";
import {
  createRegistry,
  createResourceStore,
  latestArtefact,
  objectPathVisible,
  type NewResource,
} from "../../src/store/index.js";
import { describeBackends, uid } from "../store/backends.js";
import { expectCode } from "../store/helpers.js";

const res = (
  identifier: string,
  payloadType: string,
  parent: string | null,
  accessLevel: string,
  payload: Record<string, unknown> = {},
): NewResource => ({
  identifier,
  payloadType,
  parentIdentifier: parent,
  accessLevel,
  payload: payloadType === "study" ? { modality: "CT", ...payload } : payload,
});

describeBackends("access: writes, registry, artefacts, object paths", (backend) => {
  /** A tree over two datasources; `one` sees ds1 up to internal, `two` both datasources at restricted. */
  async function setup() {
    const { store } = backend();
    const p = uid("w");
    const t = {
      p,
      ds1: `${p}ds1`,
      ds2: `${p}ds2`,
      p1: `${p}p1`,
      p2: `${p}p2`,
      s1: `${p}s1`,
      s1r: `${p}s1r`,
      x: `${p}x`,
      s2: `${p}s2`,
      f1: `${p}f1`,
      f2: `${p}f2`,
    };
    await store.create(LOCAL_CALLER, [
      res(t.ds1, "datasource", null, "public", { name: "one" }),
      res(t.ds2, "datasource", null, "public", { name: "two" }),
      res(t.p1, "patient", t.ds1, "internal", { datasource_id: t.ds1 }),
      res(t.p2, "patient", t.ds2, "internal", { datasource_id: t.ds2 }),
      res(t.s1, "study", t.p1, "internal"),
      res(t.s1r, "study", t.p1, "restricted"),
      res(t.x, "series", t.s1r, "internal"),
      res(t.s2, "study", t.p2, "public"),
      res(t.f1, "file", t.s1, "internal", { path: `s3://bucket/${p}/f1` }),
      res(t.f2, "file", t.s2, "public", { path: `s3://bucket/${p}/f2` }),
    ]);
    const one = grantsOf([
      { kind: "datasource", id: t.ds1 },
      { kind: "clearance", level: "internal" },
    ]);
    const two = grantsOf([
      { kind: "datasource", id: t.ds1 },
      { kind: "datasource", id: t.ds2 },
      { kind: "clearance", level: "restricted" },
    ]);
    return { t, one, two };
  }

  const ids = async (list: readonly string[], grants: Grants = ALL_GRANTS) =>
    (await backend().store.read(grants, list, { excludeChildren: true })).map((r) => r.identifier);
  const reason = async (p: Promise<unknown>, code: Code) => reasonOf(await expectCode(p, code));

  it("create: outside the grants is 403 and writes nothing; an invisible parent is a missing one", async () => {
    const { store } = backend();
    const { t, one } = await setup();
    const n = (s: string) => `${t.p}new-${s}`;
    expect((await store.create(callerWith(one), [res(n("ok"), "series", t.s1, "internal")])).count).toBe(1);
    // A parent the caller may not see answers as a missing one, and the whole batch fails.
    expect(
      await reason(
        store.create(callerWith(one), [res(n("a"), "series", t.s1, "internal"), res(n("b"), "series", t.s2, "public")]),
        Code.FailedPrecondition,
      ),
    ).toBe("DANGLING_PARENT");
    expect(
      await reason(store.create(callerWith(one), [res(n("c"), "series", t.s1, "restricted")]), Code.PermissionDenied),
    ).toBe("OUTSIDE_GRANTS");
    expect(
      await reason(
        store.create(callerWith(one), [res(n("d"), "patient", null, "internal", { datasource_id: t.ds2 })]),
        Code.PermissionDenied,
      ),
    ).toBe("OUTSIDE_GRANTS");
    expect(
      await reason(
        store.create(callerWith(one), [res(n("e"), "datasource", null, "public", { name: "e" })]),
        Code.PermissionDenied,
      ),
    ).toBe("OUTSIDE_GRANTS");
    expect(
      await reason(store.create(callerWith(one), [res(n("f"), "series", t.s1r, "internal")]), Code.FailedPrecondition),
    ).toBe("DANGLING_PARENT");
    // No datasource at all: governed by clearance alone.
    expect((await store.create(callerWith(one), [res(n("g"), "study", null, "public")])).count).toBe(1);
    expect(await ids([n("ok"), n("a"), n("b"), n("c"), n("d"), n("e"), n("f"), n("g")])).toEqual([n("ok"), n("g")]);
  });

  it("update: invisible is unknown; levels beyond the clearance and moves out of the grants are 403", async () => {
    const { store, db } = backend();
    const { t, one, two } = await setup();
    expect(await reason(store.update(callerWith(one), [[t.s1r, { license: "x" }]]), Code.FailedPrecondition)).toBe(
      "UNKNOWN_IDENTIFIER",
    );
    expect(
      await reason(
        store.update(callerWith(one), [
          [t.s1, { license: "x" }],
          [t.s2, { license: "y" }],
        ]),
        Code.FailedPrecondition,
      ),
    ).toBe("UNKNOWN_IDENTIFIER");
    expect(
      await reason(store.update(callerWith(one), [[t.s1, { accessLevel: "restricted" }]]), Code.PermissionDenied),
    ).toBe("OUTSIDE_GRANTS");
    expect(
      await reason(
        store.update(callerWith(one), [[t.p1, { payload: { datasource_id: t.ds2 } }]]),
        Code.PermissionDenied,
      ),
    ).toBe("OUTSIDE_GRANTS");
    expect(
      await reason(store.update(callerWith(one), [[t.s1, { parentIdentifier: t.p2 }]]), Code.FailedPrecondition),
    ).toBe("DANGLING_PARENT");
    const [s1] = await store.read(ALL_GRANTS, [t.s1]);
    expect(s1).toMatchObject({ version: 1, license: null, accessLevel: "internal", parentIdentifier: t.p1 });
    // Allowed: within the grants before and after; the moved subtree takes its new datasource.
    expect((await store.update(callerWith(one), [[t.s1, { accessLevel: "public", license: "MIT" }]])).count).toBe(1);
    expect((await store.update(callerWith(two), [[t.s1, { parentIdentifier: t.p2 }]])).count).toBe(1);
    const { rows } = await db.query<{ identifier: string; datasource_id: string }>(
      "SELECT identifier, datasource_id FROM resources WHERE identifier = ANY($1::text[]) ORDER BY identifier",
      [[t.s1, t.f1]],
    );
    expect(rows.map((r) => r.datasource_id)).toEqual([t.ds2, t.ds2]);
    // Now outside `one`: unknown to it.
    expect(await ids([t.s1, t.f1], one)).toEqual([]);
    expect(await reason(store.update(callerWith(one), [[t.f1, { license: "x" }]]), Code.FailedPrecondition)).toBe(
      "UNKNOWN_IDENTIFIER",
    );
  });

  it("update and create: a writer without every datasource cannot move what it sees out of its datasources, taking hidden descendants along", async () => {
    const { store } = backend();
    const { t, one, two } = await setup();
    // h: restricted, below s1 (internal, ds1); `one` sees s1 but not h.
    const h = `${t.p}h`;
    await store.create(LOCAL_CALLER, [res(h, "series", t.s1, "restricted")]);
    const ds2Restricted = grantsOf([
      { kind: "datasource", id: t.ds2 },
      { kind: "clearance", level: "restricted" },
    ]);
    expect(await ids([h], ds2Restricted)).toEqual([]);
    // To the root, or directly below the datasource node (a datasource node hands down no datasource):
    // s1 and h would have none, and every datasource's restricted callers would see h.
    for (const parentIdentifier of [null, t.ds1]) {
      const err = await expectCode(
        store.update(callerWith(one), [[t.s1, { parentIdentifier }]]),
        Code.PermissionDenied,
      );
      expect(reasonOf(err)).toBe("OUTSIDE_GRANTS");
      expect(err.rawMessage).toContain(t.s1);
      expect(err.rawMessage).not.toContain(h);
    }
    expect(await ids([h], ds2Restricted)).toEqual([]);
    const [s1] = await store.read(ALL_GRANTS, [t.s1]);
    expect(s1).toMatchObject({ version: 1, parentIdentifier: t.p1 });
    // A tombstone of another datasource re-created at the root by `one` would hand over f2,
    // which the delete (no cascade) left active below it.
    await store.delete(LOCAL_CALLER, [t.s2]);
    expect(
      await reason(store.create(callerWith(one), [res(t.s2, "study", null, "public")]), Code.PermissionDenied),
    ).toBe("OUTSIDE_GRANTS");
    expect(
      await reason(store.create(callerWith(one), [res(t.s2, "study", t.p1, "public")]), Code.PermissionDenied),
    ).toBe("OUTSIDE_GRANTS");
    expect(await ids([t.s2, t.f2], one)).toEqual([]);
    // Between datasources it holds, a writer may move; so may one with every datasource, to the root too.
    expect((await store.update(callerWith(two), [[t.s1, { parentIdentifier: t.p2 }]])).count).toBe(1);
    expect(await ids([h], ds2Restricted)).toEqual([h]);
    expect((await store.update(LOCAL_CALLER, [[t.s1, { parentIdentifier: null }]])).count).toBe(1);
    // Once it has no datasource, `one` may move it into ds1 (that hides it from the others).
    expect((await store.update(callerWith(one), [[t.s1, { parentIdentifier: t.p1 }]])).count).toBe(1);
    expect(await ids([h], ds2Restricted)).toEqual([]);
  });

  it("update and create: a parent the caller may not see is a missing one, also where it would close a cycle or pass the depth limit", async () => {
    const { store, db } = backend();
    const { t, one } = await setup();
    // s1r (restricted) sits below p1, which `one` may see: moving p1 under it would close a cycle.
    // The answer must be the one for a parent that does not exist, not CYCLE (which says that s1r
    // exists and lies below p1, which no read tells `one`).
    const missing = await reason(
      store.update(callerWith(one), [[t.s1, { parentIdentifier: `${t.p}nowhere` }]]),
      Code.FailedPrecondition,
    );
    expect(missing).toBe("DANGLING_PARENT");
    expect(
      await reason(store.update(callerWith(one), [[t.p1, { parentIdentifier: t.s1r }]]), Code.FailedPrecondition),
    ).toBe(missing);
    // The same move by a caller who may see s1r is the cycle it is.
    expect(
      await reason(store.update(LOCAL_CALLER, [[t.p1, { parentIdentifier: t.s1r }]]), Code.FailedPrecondition),
    ).toBe("CYCLE");
    const [p1] = await store.read(ALL_GRANTS, [t.p1]);
    expect(p1).toMatchObject({ version: 1, parentIdentifier: t.ds1 });
    // Nor where the hidden parent sits at the depth limit (s1r has two ancestors): TREE_TOO_DEEP would tell its depth.
    const shallow = createResourceStore(db, { maxTreeDepth: 2 });
    expect(
      await reason(shallow.update(callerWith(one), [[t.f1, { parentIdentifier: t.s1r }]]), Code.FailedPrecondition),
    ).toBe(missing);
    expect(
      await reason(
        shallow.create(callerWith(one), [res(`${t.p}deep`, "series", t.s1r, "internal")]),
        Code.FailedPrecondition,
      ),
    ).toBe(missing);
    // A parent it may see at the same depth (s1) is too deep, as it is.
    expect(
      await reason(
        shallow.create(callerWith(one), [res(`${t.p}deep`, "series", t.s1, "internal")]),
        Code.FailedPrecondition,
      ),
    ).toBe("TREE_TOO_DEEP");
    expect(await ids([`${t.p}deep`])).toEqual([]);
  });

  it("delete and restore: invisible identifiers are skipped; a cascade stops at what the caller may not see", async () => {
    const { store } = backend();
    const { t, one } = await setup();
    expect((await store.delete(callerWith(one), [t.s1r, t.s2])).count).toBe(0);
    expect(await ids([t.s1r, t.s2])).toEqual([t.s1r, t.s2]);
    // p1's visible subtree: p1, s1, f1; s1r (restricted) and x below it stay.
    expect((await store.delete(callerWith(one), [t.p1], { cascade: true })).count).toBe(3);
    expect(await ids([t.p1, t.s1, t.f1, t.s1r, t.x])).toEqual([t.s1r, t.x]);
    expect((await store.restore(LOCAL_CALLER, [t.s1r], { cascade: true })).count).toBe(0);
    expect((await store.restore(callerWith(one), [t.p1], { cascade: true })).count).toBe(3);
    expect(await ids([t.p1, t.s1, t.f1, t.s1r, t.x])).toEqual([t.p1, t.s1, t.f1, t.s1r, t.x]);
    // A tombstone the caller may not see is not restored by it; x (internal, ds1) is one it may see.
    await store.delete(LOCAL_CALLER, [t.s1r], { cascade: true });
    expect((await store.restore(callerWith(one), [t.s1r, t.x])).count).toBe(1);
    expect(await ids([t.s1r, t.x])).toEqual([t.x]);
  });

  it("registry: register needs the datasource; patients outside the grants are not registered", async () => {
    const { db } = backend();
    const { t, one } = await setup();
    const registry = createRegistry({ db, keys: [{ id: "default", secret: randomBytes(32) }] });
    const euid = `u-${t.p}`;
    expect(await reason(registry.registerPatient(one, t.ds2, euid), Code.PermissionDenied)).toBe("OUTSIDE_GRANTS");
    const mine = await registry.registerPatient(one, t.ds1, euid);
    expect(await registry.resolvePatient(one, t.ds1, euid)).toBe(mine);
    const theirs = await registry.registerPatient(ALL_GRANTS, t.ds2, euid);
    expect(await reason(registry.resolvePatient(one, t.ds2, euid), Code.FailedPrecondition)).toBe("NOT_REGISTERED");
    expect(await reason(registry.registerStudy(one, theirs, "s"), Code.FailedPrecondition)).toBe("NOT_REGISTERED");
    await registry.registerStudy(ALL_GRANTS, theirs, "s");
    expect(await reason(registry.resolveStudy(one, theirs, "s"), Code.FailedPrecondition)).toBe("NOT_REGISTERED");
    const study = await registry.registerStudy(one, mine, "s");
    expect(await registry.resolveStudy(one, mine, "s")).toBe(study);
  });

  it("artefacts latest and object paths answer only for what the caller may see now", async () => {
    const { store, db } = backend();
    const { t, one } = await setup();
    const art = (id: string, parent: string, level: string) => ({
      ...res(id, "artefact", parent, level, {
        repo: `${t.p}r`,
        branch: "main",
        path: "m.onnx",
        status: "succeeded",
        uri: `s3://bucket/${id}`,
      }),
    });
    await store.create(LOCAL_CALLER, [art(`${t.p}a1`, t.s1, "internal")]);
    // Levels are not inherited: only a2's own datasource (ds2) hides it from `one`.
    await store.create(LOCAL_CALLER, [art(`${t.p}a2`, t.s2, "internal")]);
    const q = { repo: `${t.p}r`, branch: "main", path: "m.onnx" };
    expect((await latestArtefact(db, ALL_GRANTS, q))?.identifier).toBe(`${t.p}a2`);
    expect((await latestArtefact(db, one, q))?.identifier).toBe(`${t.p}a1`);
    expect(await objectPathVisible(db, one, `s3://bucket/${t.p}/f1`)).toBe(true);
    expect(await objectPathVisible(db, one, `s3://bucket/${t.p}/f2`)).toBe(false);
    expect(await objectPathVisible(db, one, `s3://bucket/${t.p}a1`)).toBe(true);
    expect(await objectPathVisible(db, one, `s3://bucket/${t.p}a2`)).toBe(false);
    await store.delete(LOCAL_CALLER, [t.f1]);
    expect(await objectPathVisible(db, one, `s3://bucket/${t.p}/f1`)).toBe(false);
  });
});
