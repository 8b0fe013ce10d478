// Statistics at an as_of for a caller with narrower grants (docs/access.md,
// the stricter-of rule): a resource visible at the point and hidden since is
// not counted, and when it held its group's last change, the datasource's
// last change is the newest of what the caller still sees there. The log
// of counts knows the group's last change, not the one before it; the store
// finds that one by walking the versions back from it (store/stats.ts,
// lastSeen), never by reading the history at the point.
import { expect, it } from "vitest";
import { ALL_GRANTS, LOCAL_CALLER, type Grants } from "../../src/access/index.js";
import { datasourceStats } from "../../src/store/index.js";
import { describeBackends, uid } from "../store/backends.js";
import { recording, type Recorded } from "../store/recording.js";

describeBackends("statistics at an as_of when the group's last change is hidden since", (backend) => {
  it("counts what the caller sees and names the newest change among it", async () => {
    const { store, db } = backend();
    const p = uid("hl");
    const D = `${p}D`;
    const file = (id: string, at = "public") => ({
      identifier: `${p}${id}`,
      payloadType: "file",
      parentIdentifier: `${p}pat`,
      accessLevel: at,
      payload: { path: `s3://b/${p}${id}`, size_bytes: "5" },
    });
    const patient = await store.create(LOCAL_CALLER, [
      { identifier: `${p}pat`, payloadType: "patient", payload: { datasource_id: D } },
    ]);
    const first = await store.create(LOCAL_CALLER, [file("f1")]);
    // Another datasource's writes between the caller's two files: the walk back passes them.
    for (let i = 0; i < 3; i++)
      await store.create(LOCAL_CALLER, [
        { identifier: `${p}other${i}`, payloadType: "patient", payload: { datasource_id: `${p}E` } },
      ]);
    const second = await store.create(LOCAL_CALLER, [file("f2"), file("f3")]);
    const point = second.at;
    // After the point: f2 and f3 are raised beyond the caller's clearance; at the point they were its
    // group's last change, and the stricter-of rule hides them there too.
    await store.update(LOCAL_CALLER, [
      [`${p}f2`, { accessLevel: "restricted" }],
      [`${p}f3`, { accessLevel: "restricted" }],
    ]);
    const caller: Grants = { datasources: new Set([D]), clearance: "internal" };
    const sent: Recorded[] = [];
    const [row] = await datasourceStats(recording(db, sent), caller, { datasourceId: D, asOf: point });
    expect(row).toMatchObject({
      datasourceId: D,
      resources: 2,
      byPayloadType: { patient: 1, file: 1 },
      totalBytes: "5",
      lastUpdatedAt: first.at,
    });
    expect(first.at > patient.at).toBe(true);
    // No statement groups the history at the point (what the statistics read before the log covered it).
    expect(sent.filter((r) => /GROUP BY a\.datasource_id/.test(r.sql) && !/changed/.test(r.sql))).toEqual([]);
    // A caller who sees everything counts them, and their change is the last.
    const [all] = await datasourceStats(db, ALL_GRANTS, { datasourceId: D, asOf: point });
    expect(all).toMatchObject({ resources: 4, totalBytes: "15", lastUpdatedAt: second.at });
  });
});
