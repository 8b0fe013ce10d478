import { Code } from "@connectrpc/connect";
import { expect, it } from "vitest";
import type { NewResource } from "../../src/store/index.js";
import { uid } from "../store/backends.js";
import { expectCode } from "../store/helpers.js";
import { describeServices, type Services } from "../lineage/harness.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

const patient = (identifier: string, parent: string | null, datasourceId: string): NewResource => ({
  identifier,
  payloadType: "patient",
  parentIdentifier: parent,
  payload: { datasource_id: datasourceId },
});
const node = (
  identifier: string,
  payloadType: string,
  parent: string,
  extra: Partial<NewResource> = {},
): NewResource => ({
  identifier,
  payloadType,
  parentIdentifier: parent,
  payload: payloadType === "file" ? { path: `s3://b/${identifier}` } : {},
  ...extra,
});
const file = (identifier: string, parent: string, size: string): NewResource =>
  node(identifier, "file", parent, { payload: { path: `s3://b/${identifier}`, size_bytes: size } });

interface Expected {
  datasourceId: string;
  patients: number;
  studies: number;
  resources: number;
  byPayloadType: Record<string, number>;
  byAccessLevel: Record<string, number>;
  totalBytes: string;
  lastUpdatedAt: string | undefined;
}

describeServices("GET /datasources/stats and /datasources/detailed-stats", (svc) => {
  const store = () => svc().backend.store;

  /** The stats of the datasources named by prefix, over v1 and v2, with the view stale and (PostgreSQL) fresh. */
  async function statsOf(s: Services, prefix: string) {
    const plain = (await s.stats.stats({})).datasources.filter((d) => d.datasourceId.startsWith(prefix));
    const v2 = (await s.statsV2.stats({})).datasources.filter((d) => d.datasourceId.startsWith(prefix));
    expect(v2).toEqual(plain);
    const detailed = (await s.stats.detailedStats({})).datasources.filter((d) => d.datasourceId.startsWith(prefix));
    expect(detailed.map((d) => [d.datasourceId, d.patients, d.studies, d.resources])).toEqual(
      plain.map((d) => [d.datasourceId, d.patients, d.studies, d.resources]),
    );
    for (const d of detailed) {
      const [one] = (await s.stats.detailedStats({ datasourceId: d.datasourceId })).datasources;
      expect(one).toEqual(d);
    }
    return detailed.map((d): Expected => ({
      datasourceId: d.datasourceId,
      patients: Number(d.patients),
      studies: Number(d.studies),
      resources: Number(d.resources),
      byPayloadType: Object.fromEntries(Object.entries(d.byPayloadType).map(([k, v]) => [k, Number(v)])),
      byAccessLevel: Object.fromEntries(Object.entries(d.byAccessLevel).map(([k, v]) => [k, Number(v)])),
      totalBytes: d.totalBytes,
      lastUpdatedAt: d.lastUpdatedAt,
    }));
  }

  async function expectStats(prefix: string, expected: Expected[]) {
    const s = svc();
    expect(await statsOf(s, prefix)).toEqual(expected);
    // The refresh endpoint answers at once and changes nothing.
    await s.admin.refreshMaterializedViews({});
    expect(await statsOf(s, prefix)).toEqual(expected);
  }

  const lastUpdated = async (ids: string[]) => {
    const rows = await store().read(ALL_GRANTS, ids, { excludeChildren: true });
    return rows
      .map((r) => r.updatedAt)
      .sort()
      .at(-1);
  };

  it("attributes resources to the nearest patient's datasource through creates, moves, deletes and restores", async () => {
    const p = uid("st");
    const [A, B, C] = [`${p}A`, `${p}B`, `${p}C`];
    const reg = svc().registry;
    const { identifier: p1 } = await reg.registerPatient({ datasourceId: A, externalUid: "mrn-1" });
    await reg.registerPatient({ datasourceId: A, externalUid: "mrn-2" });
    const { identifier: p3 } = await reg.registerPatient({ datasourceId: B, externalUid: "mrn-3" });
    const { identifier: s1 } = await reg.registerStudy({ patientIdentifier: p1, externalUid: "1.1" });
    const { identifier: s2 } = await reg.registerStudy({ patientIdentifier: p1, externalUid: "1.2" });
    const { identifier: s3 } = await reg.registerStudy({ patientIdentifier: p3, externalUid: "3.1" });

    // registered but nothing created yet: listed from the registry
    await expectStats(p, [
      {
        datasourceId: A,
        patients: 2,
        studies: 2,
        resources: 0,
        byPayloadType: {},
        byAccessLevel: {},
        totalBytes: "0",
        lastUpdatedAt: undefined,
      },
      {
        datasourceId: B,
        patients: 1,
        studies: 1,
        resources: 0,
        byPayloadType: {},
        byAccessLevel: {},
        totalBytes: "0",
        lastUpdatedAt: undefined,
      },
    ]);

    await store().create(LOCAL_CALLER, [
      { identifier: `${p}dsA`, payloadType: "datasource", payload: { name: "A" } },
      patient(p1, `${p}dsA`, A),
      node(s1, "study", p1),
      node(`${p}se`, "series", s1),
      file(`${p}f1`, `${p}se`, "9007199254740993"),
      file(`${p}f2`, s1, "7"),
      node(s2, "study", p1, { accessLevel: "public" }),
      patient(p3, null, B),
      node(s3, "study", p3),
      // a patient nested under a study of A belongs to its own datasource, and so does what hangs below it
      patient(`${p}q`, s1, B),
      file(`${p}fq`, `${p}q`, "5"),
      // a patient created with a client-chosen identifier, never registered: its datasource is listed too
      patient(`${p}c`, null, C),
    ]);
    const aIds = [p1, s1, `${p}se`, `${p}f1`, `${p}f2`, s2];
    const bIds = [p3, s3, `${p}q`, `${p}fq`];
    await expectStats(p, [
      {
        datasourceId: A,
        patients: 2,
        studies: 2,
        resources: 6,
        byPayloadType: { patient: 1, study: 2, series: 1, file: 2 },
        byAccessLevel: { internal: 5, public: 1 },
        totalBytes: "9007199254741000",
        lastUpdatedAt: await lastUpdated(aIds),
      },
      {
        datasourceId: B,
        patients: 1,
        studies: 1,
        resources: 4,
        byPayloadType: { patient: 2, study: 1, file: 1 },
        byAccessLevel: { internal: 4 },
        totalBytes: "5",
        lastUpdatedAt: await lastUpdated(bIds),
      },
      {
        datasourceId: C,
        patients: 0,
        studies: 0,
        resources: 1,
        byPayloadType: { patient: 1 },
        byAccessLevel: { internal: 1 },
        totalBytes: "0",
        lastUpdatedAt: await lastUpdated([`${p}c`]),
      },
    ]);

    // move s2 (public) to patient p3: it counts for B now; registered studies do not move
    await svc().resources.update({
      updates: { [s2]: { parentIdentifier: p3, updateMask: { paths: ["parent_identifier"] } } },
    });
    // delete the series (with f1), and the unregistered patient
    await svc().resources.delete({ identifiers: [`${p}se`, `${p}c`] });
    await expectStats(p, [
      {
        datasourceId: A,
        patients: 2,
        studies: 2,
        resources: 3,
        byPayloadType: { patient: 1, study: 1, file: 1 },
        byAccessLevel: { internal: 3 },
        totalBytes: "7",
        lastUpdatedAt: await lastUpdated([p1, s1, `${p}f2`]),
      },
      {
        datasourceId: B,
        patients: 1,
        studies: 1,
        resources: 5,
        byPayloadType: { patient: 2, study: 2, file: 1 },
        byAccessLevel: { internal: 4, public: 1 },
        totalBytes: "5",
        lastUpdatedAt: await lastUpdated([...bIds, s2]),
      },
    ]);
    await expectCode(svc().stats.detailedStats({ datasourceId: C }), Code.NotFound);

    // restore the series and f1 (the exact inverse of that delete); tombstone patient p3 with everything below
    await svc().resources.restore({ identifiers: [`${p}se`] });
    await svc().resources.delete({ identifiers: [p3] });
    await expectStats(p, [
      {
        datasourceId: A,
        patients: 2,
        studies: 2,
        resources: 5,
        byPayloadType: { patient: 1, study: 1, series: 1, file: 2 },
        byAccessLevel: { internal: 5 },
        totalBytes: "9007199254741000",
        lastUpdatedAt: await lastUpdated([p1, s1, `${p}se`, `${p}f1`, `${p}f2`]),
      },
      // p3 is gone but registered; q still counts for B (it hangs under s1, which is active)
      {
        datasourceId: B,
        patients: 1,
        studies: 1,
        resources: 2,
        byPayloadType: { patient: 1, file: 1 },
        byAccessLevel: { internal: 2 },
        totalBytes: "5",
        lastUpdatedAt: await lastUpdated([`${p}q`, `${p}fq`]),
      },
    ]);
  });

  it("a resource left active under a tombstone counts for the datasource access reads it under (through the tombstone)", async () => {
    const p = uid("tb");
    const A = `${p}A`;
    await store().create(LOCAL_CALLER, [
      patient(`${p}pt`, null, A),
      node(`${p}st`, "study", `${p}pt`),
      node(`${p}se`, "series", `${p}st`),
      // Above the narrow caller's clearance: its cascading delete of the series leaves this one active.
      node(`${p}an`, "annotation", `${p}se`, { accessLevel: "restricted", payload: { label: "l" } }),
    ]);
    const narrow = { actor: "narrow", grants: { datasources: new Set([A]), clearance: "internal" as const } };
    const deleted = await store().delete(narrow, [`${p}se`], { cascade: true });
    expect(deleted.count).toBe(1);
    expect(
      (await store().read(ALL_GRANTS, [`${p}se`, `${p}an`], { excludeChildren: true })).map((r) => r.identifier),
    ).toEqual([`${p}an`]);
    // Access reads the annotation as A's: a caller of another datasource does not see it.
    const other = { datasources: new Set([`${p}B`]), clearance: "restricted" as const };
    expect(await store().read(other, [`${p}an`], { excludeChildren: true })).toEqual([]);
    // And statistics count it for A, as access attributes it (it was counted for no datasource).
    await expectStats(p, [
      {
        datasourceId: A,
        patients: 0,
        studies: 0,
        resources: 3,
        byPayloadType: { patient: 1, study: 1, annotation: 1 },
        byAccessLevel: { internal: 2, restricted: 1 },
        totalBytes: "0",
        lastUpdatedAt: await lastUpdated([`${p}pt`, `${p}st`, `${p}an`]),
      },
    ]);
  });

  it("lists datasources sorted by byte order; an unknown datasource_id is 404", async () => {
    const p = uid("so");
    for (const d of [`${p}b`, `${p}B`, `${p}a`, `${p}_`])
      await svc().registry.registerPatient({ datasourceId: d, externalUid: "x" });
    const ids = (await svc().stats.stats({})).datasources.map((d) => d.datasourceId).filter((d) => d.startsWith(p));
    expect(ids).toEqual([`${p}B`, `${p}_`, `${p}a`, `${p}b`]);
    await expectCode(svc().stats.detailedStats({ datasourceId: `${p}nowhere` }), Code.NotFound);
    await expectCode(svc().statsV2.detailedStats({ datasourceId: `${p}nowhere` }), Code.NotFound);
    await expectCode(svc().stats.detailedStats({ datasourceId: "" }), Code.InvalidArgument);
  });
});
