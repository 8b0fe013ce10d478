// What the tests of the log of counts share: one history that moves,
// relabels, deletes and restores across datasources, the statistics at
// each of its points for two callers, and whether those statistics read
// the history (what they did before the log covered the point).
import { expect } from "vitest";
import { ALL_GRANTS, LOCAL_CALLER, type Grants } from "../../src/access/index.js";
import { createResourceStore, datasourceStats, type Db } from "../../src/store/index.js";
import { recording, type Recorded } from "../store/recording.js";

/** A caller who sees everything, and one granted datasource A up to internal. */
const CALLERS: Grants[] = [ALL_GRANTS, { datasources: new Set(["A"]), clearance: "internal" }];

export /**
 * A history that moves, relabels, deletes and restores across two
 * datasources; the stamp of every write. `halfway` runs after the fourth.
 */
async function writeHistory(db: Db, halfway?: () => Promise<void>): Promise<string[]> {
  const store = createResourceStore(db);
  const file = (id: string, parent: string, size: number, level = "public") => ({
    identifier: id,
    payloadType: "file",
    parentIdentifier: parent,
    accessLevel: level,
    payload: { path: `s3://b/${id}`, size_bytes: String(size) },
  });
  const points: string[] = [];
  const write = async (op: () => Promise<{ at: string }>) => points.push((await op()).at);
  await write(() =>
    store.create(LOCAL_CALLER, [
      { identifier: "pa", payloadType: "patient", payload: { datasource_id: "A" } },
      { identifier: "pb", payloadType: "patient", accessLevel: "internal", payload: { datasource_id: "B" } },
      // A datasource id with what JSON and COPY escape (a backslash, quotes, a tab) and a character beyond ASCII.
      { identifier: "pw", payloadType: "patient", payload: { datasource_id: 'we\\ird "ds"\t\u2713' } },
      {
        identifier: "fw",
        payloadType: "file",
        parentIdentifier: "pw",
        payload: { path: "s3://b/fw", size_bytes: "7" },
      },
      { identifier: "sa", payloadType: "study", parentIdentifier: "pa", payload: {} },
      file("f1", "sa", 10),
      file("f2", "sa", 20, "internal"),
      file("f3", "pb", 40),
    ]),
  );
  await write(() => store.update(LOCAL_CALLER, [["f1", { payload: { size_bytes: "11" } }]]));
  await write(() => store.update(LOCAL_CALLER, [["sa", { parentIdentifier: "pb" }]])); // A -> B with its files
  await write(() => store.update(LOCAL_CALLER, [["f3", { accessLevel: "restricted" }]]));
  await halfway?.();
  await write(() => store.delete(LOCAL_CALLER, ["f2"]));
  await write(() => store.create(LOCAL_CALLER, [file("f4", "pa", 80)]));
  await write(() => store.update(LOCAL_CALLER, [["pb", { payload: { datasource_id: "A" } }]])); // B -> A, all below
  await write(() => store.restore(LOCAL_CALLER, ["f2"]));
  await write(() => store.delete(LOCAL_CALLER, ["pa"]));
  return points;
}

/** The statistics at each point, for each caller. */
export async function statsAtPoints(db: Db, points: readonly string[]): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const asOf of points) for (const g of CALLERS) out.push(await datasourceStats(db, g, { asOf }));
  return out;
}

/** Whether the statistics at every point, for a caller who sees everything, read the history. */
export async function readsHistory(db: Db, points: readonly string[]): Promise<boolean> {
  const sent: Recorded[] = [];
  for (const asOf of points) await datasourceStats(recording(db, sent), ALL_GRANTS, { asOf });
  expect(sent.length).toBeGreaterThan(0);
  return sent.some((r) => r.sql.includes("resource_history"));
}
