// MAX_TREE_DEPTH (docs/contract/16-limits.md) inside the write's transaction, on both
// backends: a 10,000-long chain in one create is failed_precondition with
// nothing written; an update that re-parents a subtree under a deep node and
// a restore that brings a too-deep resource back are refused the same way;
// writes at the limit are served.
import { Code } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { createResourceStore, type NewResource } from "../../src/store/index.js";
import { describeBackends, uid } from "./backends.js";
import { expectCode } from "./helpers.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

const MAX = 5;
const node = (identifier: string, parent?: string): NewResource => ({
  identifier,
  payloadType: "annotation",
  payload: { label: "l" },
  ...(parent !== undefined ? { parentIdentifier: parent } : {}),
});
const chain = (p: string, n: number, top?: string): NewResource[] =>
  Array.from({ length: n }, (_, i) => node(`${p}-${i}`, i === 0 ? top : `${p}-${i - 1}`));

async function count(db: Parameters<typeof createResourceStore>[0], prefix: string): Promise<number> {
  const { rows } = await db.query<{ n: string }>("SELECT count(*) AS n FROM resources WHERE identifier LIKE $1", [
    `${prefix}-%`,
  ]);
  return Number(rows[0]?.n);
}

async function tooDeep(p: Promise<unknown>): Promise<void> {
  const err = await expectCode(p, Code.FailedPrecondition);
  expect(err.rawMessage).toContain("MAX_TREE_DEPTH");
}

describeBackends("tree depth", (backend) => {
  const store = () => createResourceStore(backend().db, { maxTreeDepth: MAX });

  it("a 10,000-long chain in one create is failed_precondition and writes nothing", async () => {
    const p = uid("chain");
    await tooDeep(store().create(LOCAL_CALLER, chain(p, 10_000)));
    expect(await count(backend().db, p)).toBe(0);
  }, 120_000);

  it("a chain of MAX+1 resources (MAX ancestors for the last) is served; one more is refused", async () => {
    const p = uid("ok");
    expect((await store().create(LOCAL_CALLER, chain(p, MAX + 1))).count).toBe(MAX + 1);
    await tooDeep(store().create(LOCAL_CALLER, [node(`${p}-deep`, `${p}-${MAX}`)]));
    expect(await count(backend().db, p)).toBe(MAX + 1);
  });

  it("re-parenting a subtree under a deep node is refused with nothing changed", async () => {
    const p = uid("move");
    await store().create(LOCAL_CALLER, chain(p, MAX));
    const q = uid("sub");
    await store().create(LOCAL_CALLER, chain(q, 3));
    await tooDeep(store().update(LOCAL_CALLER, [[`${q}-0`, { parentIdentifier: `${p}-${MAX - 2}` }]]));
    const [moved] = await store().read(ALL_GRANTS, [`${q}-0`]);
    expect(moved?.parentIdentifier ?? null).toBeNull();
    // Under a shallower node it fits.
    expect((await store().update(LOCAL_CALLER, [[`${q}-0`, { parentIdentifier: `${p}-0` }]])).count).toBe(1);
  });

  it("a restore that would bring a too-deep subtree back is refused", async () => {
    const p = uid("rest");
    await store().create(LOCAL_CALLER, chain(p, 3));
    const q = uid("leaf");
    await store().create(LOCAL_CALLER, chain(q, 3, `${p}-2`));
    await store().delete(LOCAL_CALLER, [`${q}-0`], { cascade: true });
    // The tree above grows while the subtree is deleted...
    await store().update(LOCAL_CALLER, [[`${p}-0`, { parentIdentifier: undefined }]]);
    const r = uid("top");
    await store().create(LOCAL_CALLER, chain(r, 2));
    await store().update(LOCAL_CALLER, [[`${p}-0`, { parentIdentifier: `${r}-1` }]]);
    // ...so restoring it now would put its leaf 7 deep.
    await tooDeep(store().restore(LOCAL_CALLER, [`${q}-0`], { cascade: true }));
    const { rows } = await backend().db.query<{ is_deleted: boolean }>(
      "SELECT is_deleted FROM resources WHERE identifier = $1",
      [`${q}-0`],
    );
    expect(rows[0]?.is_deleted).toBe(true);
  });
});
