import { Code } from "@connectrpc/connect";
import { expect, it } from "vitest";
import type { NewResource } from "../../src/store/index.js";
import { uid } from "../store/backends.js";
import { expectCode, fromMicros, micros } from "../store/helpers.js";
import { describeServices } from "../lineage/harness.js";
import { LOCAL_CALLER } from "../../src/access/index.js";

const artefact = (identifier: string, p: string, status: string, extra: Record<string, unknown> = {}): NewResource => ({
  identifier,
  payloadType: "artefact",
  payload: { repo: `${p}/repo`, branch: "main", path: "models/unet.onnx", status, ...extra },
});

describeServices("GET /artefacts/latest", (svc) => {
  const store = () => svc().backend.store;
  const latest = (p: string, extra: { asOf?: string; branch?: string; path?: string } = {}) =>
    svc().artefacts.latest({
      repo: `${p}/repo`,
      branch: extra.branch ?? "main",
      path: extra.path ?? "models/unet.onnx",
      ...(extra.asOf ? { asOf: extra.asOf } : {}),
    });

  it("answers the succeeded artefact created last for repo, branch and path, as a full resource", async () => {
    const p = uid();
    await expectCode(latest(p), Code.NotFound);
    const t1 = (
      await store().create(LOCAL_CALLER, [
        artefact(`${p}a1`, p, "succeeded", { commit: "c1", uri: "s3://b/a1", metrics: { dice: 0.91 } }),
      ])
    ).at;
    const t2 = (await store().create(LOCAL_CALLER, [artefact(`${p}a2`, p, "failed")])).at;
    await store().create(LOCAL_CALLER, [
      artefact(`${p}a3`, p, "running"),
      {
        ...artefact(`${p}other-branch`, p, "succeeded"),
        payload: { repo: `${p}/repo`, branch: "dev", path: "models/unet.onnx", status: "succeeded" },
      },
    ]);
    const { resource } = await latest(p);
    expect(resource?.identifier).toBe(`${p}a1`);
    expect(resource?.payload.case).toBe("artefact");
    expect(resource?.payload.value).toMatchObject({
      commit: "c1",
      uri: "s3://b/a1",
      metrics: { dice: 0.91 },
      status: "succeeded",
    });
    expect(resource?.version).toBe(1n);
    expect(resource?.createdAt).toBe(t1);
    expect((await latest(p, { branch: "dev" })).resource?.identifier).toBe(`${p}other-branch`);
    await expectCode(latest(p, { path: "models/other.onnx" }), Code.NotFound);

    // a running artefact that succeeds later counts by its creation time
    await store().update(LOCAL_CALLER, [[`${p}a3`, { payload: { status: "succeeded" } }]]);
    expect((await latest(p)).resource?.identifier).toBe(`${p}a3`);
    // before that change, and before a1 existed
    expect((await latest(p, { asOf: t2 })).resource?.identifier).toBe(`${p}a1`);
    await expectCode(latest(p, { asOf: fromMicros(micros(t1) - 1n) }), Code.NotFound);
  });

  it("skips tombstoned artefacts, now and as they were", async () => {
    const p = uid();
    await store().create(LOCAL_CALLER, [artefact(`${p}a1`, p, "succeeded")]);
    const t = (await store().create(LOCAL_CALLER, [artefact(`${p}a2`, p, "succeeded")])).at;
    await store().delete(LOCAL_CALLER, [`${p}a2`]);
    expect((await latest(p)).resource?.identifier).toBe(`${p}a1`);
    expect((await latest(p, { asOf: t })).resource?.identifier).toBe(`${p}a2`);
    await store().delete(LOCAL_CALLER, [`${p}a1`]);
    await expectCode(latest(p), Code.NotFound);
  });

  it("orders one batch by identifier, and refuses missing fields and bad as_of", async () => {
    const p = uid();
    await store().create(LOCAL_CALLER, [
      artefact(`${p}b`, p, "succeeded"),
      artefact(`${p}c`, p, "succeeded"),
      artefact(`${p}a`, p, "succeeded"),
    ]);
    expect((await latest(p)).resource?.identifier).toBe(`${p}c`);
    await expectCode(
      svc().artefacts.latest({ repo: `${p}/repo`, branch: "", path: "models/unet.onnx" }),
      Code.InvalidArgument,
    );
    await expectCode(svc().artefacts.latest({ repo: "", branch: "main", path: "x" }), Code.InvalidArgument);
    await expectCode(latest(p, { asOf: "2026-01-01" }), Code.InvalidArgument);
  });
});
