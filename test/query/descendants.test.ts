// Descendant queries (include_indirect_parents) reach exactly what repeated
// /children calls reach: through active resources only. The current-time
// count of a subtree comes from the stored tree counts, the rows from a
// walk: both must agree (`below` checks it on every call).
import { beforeAll, expect, it } from "vitest";
import { describeBackends, uid } from "../store/backends.js";
import { clients, type Clients } from "./harness.js";

describeBackends("descendant queries", (backend) => {
  let c: Clients;
  let p: string;
  const study = (identifier: string, parentIdentifier?: string) => ({
    identifier,
    ...(parentIdentifier ? { parentIdentifier } : {}),
    payload: { case: "study" as const, value: {} },
  });
  const below = async (root: string, asOf?: string) => {
    const r = await c.query.query({
      parentIdentifier: root,
      includeIndirectParents: true,
      sortBy: "identifier",
      sortOrder: "asc",
      ...(asOf ? { asOf } : {}),
    });
    const n = await c.query.count({ parentIdentifier: root, includeIndirectParents: true, ...(asOf ? { asOf } : {}) });
    expect(n.count).toBe(BigInt(r.results.length));
    return r.results.map((x) => x.identifier.slice(p.length));
  };

  beforeAll(async () => {
    c = clients(backend());
    p = uid("dq");
    // root -> a -> b -> c, root -> d
    await c.resources.create({
      resources: [
        study(`${p}root`),
        study(`${p}a`, `${p}root`),
        study(`${p}b`, `${p}a`),
        study(`${p}c`, `${p}b`),
        study(`${p}d`, `${p}root`),
      ],
    });
  });

  it("walks every depth, and stops at a tombstone that was deleted without cascade", async () => {
    expect(await below(`${p}root`)).toEqual(["a", "b", "c", "d"]);
    const [before] = (await c.resources.read({ identifiers: [`${p}c`] })).resources;
    expect((await c.resources.delete({ identifiers: [`${p}a`], cascade: false })).deleted).toBe(1n);
    // b and c are still active, but under a tombstone: not reachable from root.
    expect(await below(`${p}root`)).toEqual(["d"]);
    expect(await below(`${p}b`)).toEqual(["c"]);
    // At an earlier instant the whole chain was active.
    expect(await below(`${p}root`, before!.createdAt)).toEqual(["a", "b", "c", "d"]);
    expect((await c.resources.restore({ identifiers: [`${p}a`] })).restored).toBe(1n);
    expect(await below(`${p}root`)).toEqual(["a", "b", "c", "d"]);
  });

  it("counts what it lists after a move, from the stored counts, at once", async () => {
    await c.resources.update({
      updates: { [`${p}c`]: { parentIdentifier: `${p}d`, updateMask: { paths: ["parent_identifier"] } } },
    });
    expect(await below(`${p}d`)).toEqual(["c"]);
    expect(await below(`${p}b`)).toEqual([]);
    expect(await below(`${p}root`)).toEqual(["a", "b", "c", "d"]);
  });
});
