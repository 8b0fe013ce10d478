// The JSON Schemas served at /schemas and the service's own validation must
// agree: every sample the schemas accept is created over REST, every sample
// they refuse is a 400 that writes nothing. Both sides come from the same
// descriptors; this proves it on the wire, not only by construction.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";
import { strictAjv } from "./ajv.js";
import { invalidSamples, validSamples } from "./samples.js";

let srv: TestServer;
let schemas: Record<string, object>;
beforeAll(async () => {
  srv = await startTestServer();
  schemas = (await (await fetch(`${srv.url}/schemas`)).json()) as Record<string, object>;
});
afterAll(async () => {
  await srv?.close();
});

let n = 0;
async function create(type: string, payload: object): Promise<{ status: number; body: any; id: string }> {
  const id = `agree-${type}-${n++}`;
  const res = await fetch(`${srv.url}/resources/create`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ resources: [{ identifier: id, payload_type: type, ...payload }] }),
  });
  return { status: res.status, body: await res.json(), id };
}

async function exists(id: string): Promise<boolean> {
  const res = await fetch(`${srv.url}/resources/read`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ identifiers: [id], exclude_children: true }),
  });
  return ((await res.json()) as unknown[]).length === 1;
}

describe("/schemas agrees with the service's validation", () => {
  it("serves a schema for every payload type that has samples", () => {
    expect(Object.keys(schemas).sort()).toEqual(Object.keys(validSamples).sort());
  });

  const valid = Object.entries(validSamples).flatMap(([type, list]) => list.map((p, i) => [type, i, p] as const));
  it.each(valid)("%s valid sample %i: schema accepts and the service creates it", async (type, _i, payload) => {
    const validate = strictAjv().compile(schemas[type]!);
    expect(validate(payload), JSON.stringify(validate.errors)).toBe(true);
    const r = await create(type, payload);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(await exists(r.id)).toBe(true);
  });

  const invalid = Object.entries(invalidSamples).flatMap(([type, list]) =>
    list.map((s) => [type, s.why, s.payload] as const),
  );
  it.each(invalid)("%s invalid (%s): schema refuses and the service answers 400", async (type, _why, payload) => {
    const validate = strictAjv().compile(schemas[type]!);
    expect(validate(payload)).toBe(false);
    const r = await create(type, payload);
    expect(r.status).toBe(400);
    expect(r.body.code).toBe("invalid_argument");
    expect(await exists(r.id)).toBe(false);
  });
});
