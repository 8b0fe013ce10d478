import { Code } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { describeBackends, uid } from "../store/backends.js";
import { ds, expectCode, fromMicros, micros, study, TS_PATTERN } from "../store/helpers.js";
import type { NewResource } from "../../src/store/index.js";
import { buildServices, describeServices } from "./harness.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

const file = (identifier: string, parent: string, size: string): NewResource => ({
  identifier,
  payloadType: "file",
  parentIdentifier: parent,
  payload: { path: `s3://b/${identifier}`, size_bytes: size },
});

describeServices("GET /children", (svc) => {
  const store = () => svc().backend.store;
  const children = async (parent: string | undefined, extra: { asOf?: string; withPayloads?: boolean } = {}) =>
    (await svc().lineage.children({ ...(parent !== undefined ? { parentIdentifier: parent } : {}), ...extra })).nodes;

  it("lists active children oldest first, equal created_at by identifier, with exact counts", async () => {
    const p = uid();
    await store().create(LOCAL_CALLER, [
      ds(`${p}d`),
      study(`${p}s_b`, `${p}d`),
      study(`${p}s_a`, `${p}d`),
      { identifier: `${p}x`, payloadType: "series", parentIdentifier: `${p}s_b`, payload: { modality: "CT" } },
      file(`${p}f1`, `${p}x`, "1"),
      file(`${p}f2`, `${p}x`, "2"),
    ]);
    // a later batch comes after, although its identifier sorts first
    await store().create(LOCAL_CALLER, [study(`${p}s_0`, `${p}d`)]);
    const nodes = await children(`${p}d`);
    expect(
      nodes.map((n) => [n.identifier, n.payloadType, n.parentIdentifier, n.childCount, n.descendantCount]),
    ).toEqual([
      [`${p}s_a`, "study", `${p}d`, 0n, 0n],
      [`${p}s_b`, "study", `${p}d`, 1n, 3n],
      [`${p}s_0`, "study", `${p}d`, 0n, 0n],
    ]);
    for (const n of nodes) {
      expect(n.createdAt).toMatch(TS_PATTERN);
      expect(n.payload).toBeUndefined();
    }
    const [read] = await store().read(ALL_GRANTS, [`${p}s_0`]);
    expect(nodes[2]?.createdAt).toBe(read?.createdAt);
    expect(micros(nodes[0]?.createdAt ?? "")).toBeLessThan(micros(nodes[2]?.createdAt ?? ""));
  });

  it("carries the payload as proto3 JSON only with with_payloads", async () => {
    const p = uid();
    await store().create(LOCAL_CALLER, [ds(`${p}d`), file(`${p}f`, `${p}d`, "9007199254740993")]);
    const [withPayload] = await children(`${p}d`, { withPayloads: true });
    expect(withPayload?.payload).toEqual({ path: `s3://b/${p}f`, size_bytes: "9007199254740993" });
    const [without] = await children(`${p}d`, { withPayloads: false });
    expect(without?.payload).toBeUndefined();
  });

  it("leaves tombstoned children out of the listing and the counts; a walk stops at a tombstone", async () => {
    const p = uid();
    await store().create(LOCAL_CALLER, [
      ds(`${p}d`),
      study(`${p}s`, `${p}d`),
      study(`${p}t`, `${p}s`),
      study(`${p}u`, `${p}t`),
      study(`${p}v`, `${p}s`),
    ]);
    expect((await children(`${p}d`)).map((n) => [n.identifier, n.childCount, n.descendantCount])).toEqual([
      [`${p}s`, 2n, 3n],
    ]);
    await store().delete(LOCAL_CALLER, [`${p}t`], { cascade: false });
    // u is still active but hangs under a tombstone: not reachable from s
    expect((await children(`${p}d`)).map((n) => [n.identifier, n.childCount, n.descendantCount])).toEqual([
      [`${p}s`, 1n, 1n],
    ]);
    expect((await children(`${p}s`)).map((n) => n.identifier)).toEqual([`${p}v`]);
    await store().restore(LOCAL_CALLER, [`${p}t`]);
    expect((await children(`${p}d`)).map((n) => [n.identifier, n.childCount, n.descendantCount])).toEqual([
      [`${p}s`, 2n, 3n],
    ]);
  });

  it("answers 404 for a parent that is not active at that time, 400 for a malformed one", async () => {
    const p = uid();
    const made = await store().create(LOCAL_CALLER, [ds(`${p}d`), study(`${p}s`, `${p}d`)]);
    await expectCode(children(`${p}nowhere`), Code.NotFound);
    await expectCode(children(`${p}d`, { asOf: fromMicros(micros(made.at) - 1n) }), Code.NotFound);
    await store().delete(LOCAL_CALLER, [`${p}d`], { cascade: false });
    // s is still active, but its parent is not
    await expectCode(children(`${p}d`), Code.NotFound);
    expect((await children(`${p}d`, { asOf: made.at })).map((n) => n.identifier)).toEqual([`${p}s`]);
    await expectCode(children("-bad"), Code.InvalidArgument);
    await expectCode(children(`${p}s`, { asOf: "yesterday" }), Code.InvalidArgument);
  });

  it("is exact at any as_of: moves, deletes, restores and the counts below", async () => {
    const p = uid();
    const t1 = (
      await store().create(LOCAL_CALLER, [ds(`${p}a`), ds(`${p}b`), study(`${p}s`, `${p}a`), study(`${p}t`, `${p}s`)])
    ).at;
    const t2 = (await store().update(LOCAL_CALLER, [[`${p}s`, { parentIdentifier: `${p}b` }]])).at;
    const t3 = (await store().delete(LOCAL_CALLER, [`${p}t`])).at;
    const t4 = (await store().restore(LOCAL_CALLER, [`${p}t`])).at;
    const at = async (parent: string, asOf: string) =>
      (await children(parent, { asOf })).map((n) => [n.identifier, n.childCount, n.descendantCount]);
    expect(await at(`${p}a`, t1)).toEqual([[`${p}s`, 1n, 1n]]);
    expect(await at(`${p}b`, t1)).toEqual([]);
    expect(await at(`${p}a`, fromMicros(micros(t2) - 1n))).toEqual([[`${p}s`, 1n, 1n]]);
    expect(await at(`${p}a`, t2)).toEqual([]);
    expect(await at(`${p}b`, t2)).toEqual([[`${p}s`, 1n, 1n]]);
    expect(await at(`${p}b`, t3)).toEqual([[`${p}s`, 0n, 0n]]);
    expect(await at(`${p}b`, t4)).toEqual([[`${p}s`, 1n, 1n]]);
    // the current answer agrees with the latest as_of
    expect((await children(`${p}b`)).map((n) => [n.identifier, n.childCount, n.descendantCount])).toEqual([
      [`${p}s`, 1n, 1n],
    ]);
  });
});

// Roots are every active parentless resource, so this suite gets a database of its own.
describeBackends("GET /children without a parent lists the roots", (backend) => {
  it("lists active resources with no parent, as they were at as_of", async () => {
    const svc = await buildServices(backend());
    const s = backend().store;
    const roots = async (asOf?: string) =>
      (await svc.lineage.children(asOf !== undefined ? { asOf } : {})).nodes.map((n) => [
        n.identifier,
        n.descendantCount,
      ]);
    expect(await roots()).toEqual([]);
    const t1 = (await s.create(LOCAL_CALLER, [ds("r2"), ds("r1"), study("c1", "r1"), study("c2", "c1")])).at;
    const t2 = (await s.create(LOCAL_CALLER, [ds("r0")])).at;
    const t3 = (await s.delete(LOCAL_CALLER, ["r1"], { cascade: false })).at;
    // c1 hangs under a tombstone: it is not a root (it has a parent)
    expect(await roots()).toEqual([
      ["r2", 0n],
      ["r0", 0n],
    ]);
    expect(await roots(t1)).toEqual([
      ["r1", 2n],
      ["r2", 0n],
    ]);
    expect(await roots(t2)).toEqual([
      ["r1", 2n],
      ["r2", 0n],
      ["r0", 0n],
    ]);
    expect(await roots(t3)).toEqual([
      ["r2", 0n],
      ["r0", 0n],
    ]);
    expect(await roots("2000-01-01T00:00:00Z")).toEqual([]);
    // only an absent parent_identifier means the roots; an empty one is malformed
    await expectCode(svc.lineage.children({ parentIdentifier: "" }), Code.InvalidArgument);
  });
});
