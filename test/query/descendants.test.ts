// Descendant queries (include_indirect_parents) reach exactly what repeated
// /children calls reach: through active resources only. On PostgreSQL the
// current-time answer comes from the lineage view when it is fresh and from
// a walk when it is stale; both must give the same rows.
import { beforeAll, expect, it } from "vitest";
import { refreshLineageView } from "../../src/store/index.js";
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
    const r = await c.query.query({ parentIdentifier: root, includeIndirectParents: true, sortBy: "identifier", sortOrder: "asc", ...(asOf ? { asOf } : {}) });
    const n = await c.query.count({ parentIdentifier: root, includeIndirectParents: true, ...(asOf ? { asOf } : {}) });
    expect(n.count).toBe(BigInt(r.results.length));
    return r.results.map((x) => x.identifier.slice(p.length));
  };

  beforeAll(async () => {
    c = clients(backend());
    p = uid("dq");
    // root -> a -> b -> c, root -> d
    await c.resources.create({ resources: [study(`${p}root`), study(`${p}a`, `${p}root`), study(`${p}b`, `${p}a`), study(`${p}c`, `${p}b`), study(`${p}d`, `${p}root`)] });
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

  it("gives the same rows from the lineage view (fresh) as from the walk (stale)", async () => {
    const { db } = backend();
    await c.resources.update({ updates: { [`${p}c`]: { parentIdentifier: `${p}d`, updateMask: { paths: ["parent_identifier"] } } } });
    const stale = await below(`${p}d`);
    if (db.kind === "postgres") {
      expect(await refreshLineageView(db)).toBe(true);
      expect(await below(`${p}d`)).toEqual(stale);
      expect(await below(`${p}root`)).toEqual(["a", "b", "c", "d"]);
    }
    expect(stale).toEqual(["c"]);
  });
});
