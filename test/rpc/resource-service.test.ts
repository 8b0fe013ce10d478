// ResourceService through an in-memory router transport, with the v2 and v1
// service descriptors, so the real message conversion runs.
import { Code, ConnectError, createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { expect, it } from "vitest";
import { ResourceService as V1 } from "../../gen/resourcestore/v1/resource_service_pb.js";
import { ResourceService as V2 } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { createResourceService } from "../../src/rpc/index.js";
import { describeBackends, uid } from "../store/backends.js";
import { routerAs } from "../support/caller.js";

async function code(p: Promise<unknown>): Promise<Code | "ok"> {
  try {
    await p;
    return "ok";
  } catch (err) {
    if (err instanceof ConnectError) return err.code;
    throw err;
  }
}

describeBackends("ResourceService", (backend) => {
  let v2: Client<typeof V2>;
  let v1: Client<typeof V1>;
  const clients = () => {
    if (!v2) {
      const impl = createResourceService({
        store: backend().store,
        limits: { maxBatchItems: 4, maxQueryLimit: 10_000 },
      });
      const transport = createRouterTransport((router) => {
        router.service(V2, impl);
        router.service(V1, impl);
      }, routerAs());
      v2 = createClient(V2, transport);
      v1 = createClient(V1, transport);
    }
    return { v2, v1 };
  };

  it("creates and reads resources with their payload oneof, metadata and children", async () => {
    const { v2 } = clients();
    const p = uid();
    const res = await v2.create({
      resources: [
        {
          identifier: `${p}f`,
          parentIdentifier: `${p}d`,
          license: "MIT",
          derivedFrom: [`${p}d`],
          payload: { case: "file", value: { path: "s3://b/k", sizeBytes: 9007199254740993n } },
        },
        { identifier: `${p}d`, payload: { case: "datasource", value: { name: "D", country: "NL" } } },
      ],
    });
    expect(res.created).toBe(2n);
    const read = await v2.read({ identifiers: [`${p}d`, `${p}nope`, `${p}f`, `${p}d`] });
    expect(read.resources.map((r) => r.identifier)).toEqual([`${p}d`, `${p}f`, `${p}d`]);
    const [d, f] = read.resources;
    expect(d?.parentIdentifier).toBeUndefined();
    expect(d?.license).toBeUndefined();
    expect(d?.accessLevel).toBe("internal");
    expect(d?.children).toEqual([`${p}f`]);
    expect(d?.version).toBe(1n);
    expect(d?.payload).toMatchObject({ case: "datasource", value: { name: "D", country: "NL" } });
    expect(f?.payload.case).toBe("file");
    expect(f?.payload.case === "file" && f.payload.value.sizeBytes).toBe(9007199254740993n);
    expect(f?.payload.case === "file" && f.payload.value.sha256).toBeUndefined();
    expect(f?.createdAt).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
    const noKids = await v2.read({ identifiers: [`${p}d`], excludeChildren: true });
    expect(noKids.resources[0]?.children).toEqual([]);
  });

  it("refuses a resource without a payload, bad values, and batches over the limit", async () => {
    const { v2 } = clients();
    const p = uid();
    expect(await code(v2.create({ resources: [{ identifier: `${p}a` }] }))).toBe(Code.InvalidArgument);
    expect(
      await code(v2.create({ resources: [{ identifier: `${p}a`, payload: { case: "datasource", value: {} } }] })),
    ).toBe(Code.InvalidArgument);
    expect(
      await code(
        v2.create({
          resources: [
            { identifier: `${p}a`, accessLevel: "top", payload: { case: "datasource", value: { name: "x" } } },
          ],
        }),
      ),
    ).toBe(Code.InvalidArgument);
    const five = ["1", "2", "3", "4", "5"].map((x) => `${p}${x}`);
    expect(
      await code(
        v2.create({
          resources: five.map((identifier) => ({ identifier, payload: { case: "datasource", value: { name: "x" } } })),
        }),
      ),
    ).toBe(Code.InvalidArgument);
    expect(await code(v2.read({ identifiers: five }))).toBe(Code.InvalidArgument);
    expect(await code(v2.delete({ identifiers: five }))).toBe(Code.InvalidArgument);
    expect(await code(v2.restore({ identifiers: five }))).toBe(Code.InvalidArgument);
    expect(await code(v2.update({ updates: Object.fromEntries(five.map((id) => [id, { license: "x" }])) }))).toBe(
      Code.InvalidArgument,
    );
    expect(await code(v2.read({ identifiers: ["bad id"] }))).toBe(Code.InvalidArgument);
    expect(await code(v2.read({ identifiers: [`${p}1`], asOf: "yesterday" }))).toBe(Code.InvalidArgument);
    expect(await code(v2.read({ identifiers: [`${p}1`], asOf: "2026-01-01T00:00:00+01:00" }))).toBe("ok");
  });

  it("updates by mask (unset = cleared), by set fields without one, through payload_fields, and guards the type", async () => {
    const { v2 } = clients();
    const p = uid();
    await v2.create({
      resources: [
        { identifier: `${p}r`, payload: { case: "datasource", value: { name: "R" } } },
        {
          identifier: `${p}s`,
          license: "MIT",
          payload: { case: "series", value: { modality: "CT", seriesNumber: 4 } },
        },
      ],
    });
    // mask: license cleared, series_number cleared, modality from the member
    expect(
      (
        await v2.update({
          updates: {
            [`${p}s`]: {
              payload: { case: "series", value: { modality: "MR" } },
              updateMask: { paths: ["license", "modality", "series_number"] },
            },
          },
        })
      ).updated,
    ).toBe(1n);
    let [s] = (await v2.read({ identifiers: [`${p}s`] })).resources;
    expect(s?.license).toBeUndefined();
    expect(s?.payload).toMatchObject({ case: "series", value: { modality: "MR" } });
    expect(s?.payload.case === "series" && s.payload.value.seriesNumber).toBeUndefined();
    // no mask: the fields that are set; payload_fields read against the stored type
    await v2.update({
      updates: { [`${p}s`]: { parentIdentifier: `${p}r`, payloadFields: { instance_count: 12, description: "d" } } },
    });
    [s] = (await v2.read({ identifiers: [`${p}s`] })).resources;
    expect(s?.parentIdentifier).toBe(`${p}r`);
    expect(s?.payload).toMatchObject({
      case: "series",
      value: { modality: "MR", instanceCount: 12, description: "d" },
    });
    expect(s?.version).toBe(3n);
    // payload_fields: null clears
    await v2.update({ updates: { [`${p}s`]: { payloadFields: { description: null } } } });
    [s] = (await v2.read({ identifiers: [`${p}s`] })).resources;
    expect(s?.payload.case === "series" && s.payload.value.description).toBeUndefined();

    const refusals: [Parameters<typeof v2.update>[0], Code][] = [
      [{ updates: { [`${p}s`]: { payload: { case: "study", value: { modality: "CT" } } } } }, Code.FailedPrecondition],
      [{ updates: { [`${p}s`]: { payloadFields: { name: "x" } } } }, Code.InvalidArgument],
      [{ updates: { [`${p}s`]: { updateMask: { paths: ["nonsense"] } } } }, Code.InvalidArgument],
      [{ updates: { [`${p}s`]: { updateMask: { paths: ["identifier"] } } } }, Code.InvalidArgument],
      [{ updates: { [`${p}r`]: { updateMask: { paths: ["name"] } } } }, Code.InvalidArgument],
      [{ updates: { [`${p}r`]: { parentIdentifier: `${p}s` } } }, Code.FailedPrecondition],
      [{ updates: { [`${p}r`]: { parentIdentifier: `${p}r` } } }, Code.InvalidArgument],
      [{ updates: { [`${p}none`]: { license: "x" } } }, Code.FailedPrecondition],
      [{ updates: { [`${p}s`]: { payloadFields: { instance_count: "many" } } } }, Code.InvalidArgument],
    ];
    for (const [req, expected] of refusals) expect(await code(v2.update(req)), JSON.stringify(req)).toBe(expected);
    expect((await v2.read({ identifiers: [`${p}s`] })).resources[0]?.version).toBe(4n);
  });

  it("deletes with cascade by default, restores the same subtree, and is_deleted goes by presence", async () => {
    const { v2 } = clients();
    const p = uid();
    const ds = (identifier: string, parentIdentifier?: string) => ({
      identifier,
      ...(parentIdentifier ? { parentIdentifier } : {}),
      payload: { case: "datasource" as const, value: { name: identifier } },
    });
    await v2.create({ resources: [ds(`${p}a`), ds(`${p}b`, `${p}a`), ds(`${p}c`, `${p}b`)] });
    expect((await v2.delete({ identifiers: [`${p}b`], cascade: false })).deleted).toBe(1n);
    expect((await v2.restore({ identifiers: [`${p}b`] })).restored).toBe(1n);
    expect((await v2.delete({ identifiers: [`${p}a`] })).deleted).toBe(3n);
    expect((await v2.restore({ identifiers: [`${p}a`], cascade: false })).restored).toBe(1n);
    expect((await v2.restore({ identifiers: [`${p}b`] })).restored).toBe(2n);
    expect((await v2.update({ updates: { [`${p}c`]: { isDeleted: true } } })).updated).toBe(1n);
    expect((await v2.read({ identifiers: [`${p}a`, `${p}b`, `${p}c`] })).resources.map((r) => r.identifier)).toEqual([
      `${p}a`,
      `${p}b`,
    ]);
    expect(await code(v2.update({ updates: { [`${p}c`]: { license: "x" } } }))).toBe(Code.FailedPrecondition);
    expect((await v2.update({ updates: { [`${p}c`]: { isDeleted: false, license: "x" } } })).updated).toBe(1n);
  });

  it("serves the same handlers as resourcestore.v1", async () => {
    const { v1 } = clients();
    const p = uid();
    expect(
      (
        await v1.create({
          resources: [
            { identifier: `${p}a`, payload: { case: "patient", value: { datasourceId: "ds", sex: "other" } } },
          ],
        })
      ).created,
    ).toBe(1n);
    const at = (await v1.read({ identifiers: [`${p}a`] })).resources[0]?.updatedAt ?? "";
    expect((await v1.update({ updates: { [`${p}a`]: { payloadFields: { birth_year: 1970 } } } })).updated).toBe(1n);
    const old = await v1.read({ identifiers: [`${p}a`], asOf: at });
    expect(old.resources[0]?.payload).toMatchObject({ case: "patient", value: { datasourceId: "ds" } });
    expect(old.resources[0]?.payload.case === "patient" && old.resources[0].payload.value.birthYear).toBeUndefined();
    expect((await v1.delete({ identifiers: [`${p}a`] })).deleted).toBe(1n);
    expect(await code(v1.update({ updates: { [`${p}a`]: { payloadFields: { sex: "unknown" } } } }))).toBe(
      Code.FailedPrecondition,
    );
  });
});
