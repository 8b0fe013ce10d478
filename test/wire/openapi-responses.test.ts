// The OpenAPI document served at /openapi.json describes what the REST
// surface really answers: a scripted session over every REST route records
// each exchange, and every answer (successes and errors) validates against
// the response schema the document gives for that path, method and status.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { strictAjv } from "../schema/ajv.js";
import { startTestServer, type TestServer } from "../support/app.js";

interface Exchange {
  method: string;
  template: string;
  status: number;
  body: unknown;
}

let srv: TestServer;
let doc: any;
const exchanges: Exchange[] = [];

async function call(method: "GET" | "POST", template: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(srv.url + path, {
    method,
    ...(body !== undefined ? { headers: { "content-type": "application/json" }, body: JSON.stringify(body) } : {}),
  });
  const json = await res.json();
  exchanges.push({ method: method.toLowerCase(), template, status: res.status, body: json });
  return json;
}

beforeAll(async () => {
  srv = await startTestServer();
  doc = await (await fetch(`${srv.url}/openapi.json`)).json();
  const post = (p: string, b: unknown, t = p) => call("POST", t, p, b);
  const get = (p: string, t: string) => call("GET", t, p);

  await post("/resources/create", {
    resources: [
      { identifier: "oa-ds", payload_type: "datasource", name: "DS", country: "FR" },
      { identifier: "oa-p", parent_identifier: "oa-ds", payload_type: "patient", datasource_id: "oa-dsid" },
      {
        identifier: "oa-f",
        parent_identifier: "oa-p",
        payload_type: "file",
        path: "s3://resources/f",
        size_bytes: "5",
      },
      {
        identifier: "oa-a",
        payload_type: "artefact",
        repo: "r",
        branch: "b",
        path: "p",
        status: "succeeded",
        metrics: { auc: 0.9 },
      },
      { identifier: "oa-d", payload_type: "dataset", name: "d", row_count: "3" },
    ],
  });
  await post("/resources/create", { resources: [{ identifier: "bad id!", payload_type: "study" }] });
  await post("/resources/read", { identifiers: ["oa-ds", "oa-f", "oa-a"] });
  await post("/resources/read", { identifiers: ["oa-ds"], exclude_children: true });
  await post("/resources/update", { updates: { "oa-ds": { description: "x", license: null } } });
  await post("/resources/update", { updates: { nobody: { description: "x" } } });
  await post("/resources/delete", { identifiers: ["oa-d"] });
  await post("/resources/restore", { identifiers: ["oa-d"] });
  await post("/resources/history", { identifier: "oa-d", limit: 2 });
  await post("/resources/history", { identifier: "nobody" });
  await post("/query", { payload_type: "file", limit: 1 });
  await post("/query", { select_columns: ["license"], limit: 2 });
  await post("/query", { payload_type: "file", filters: [{ field: "nope", op: "eq", value: 1 }] });
  await post("/query/count", { payload_type: "artefact" });
  await get("/children?parent_identifier=oa-ds&with_payloads=true", "/children");
  await get("/children?parent_identifier=nobody", "/children");
  await get("/parents/oa-f", "/parents/{identifier}");
  await get("/parents/nobody", "/parents/{identifier}");
  const reg = await post("/patients/register", { datasource_id: "oa-dsid", external_uid: "u1" });
  await post("/patients/register", { datasource_id: "oa-dsid", external_uid: "u1" });
  await post("/patients/resolve", { datasource_id: "oa-dsid", external_uid: "u1" });
  await post("/studies/register", { patient_identifier: reg.identifier, external_uid: "s1" });
  await post("/studies/resolve", { patient_identifier: reg.identifier, external_uid: "s1" });
  await get("/artefacts/latest?repo=r&branch=b&path=p", "/artefacts/latest");
  await get("/artefacts/latest?repo=r&branch=b&path=none", "/artefacts/latest");
  await get("/datasources/stats", "/datasources/stats");
  await get("/datasources/detailed-stats", "/datasources/detailed-stats");
  await get("/datasources/detailed-stats?datasource_id=none", "/datasources/detailed-stats");
  await get("/schemas", "/schemas");
  await get("/whoami", "/whoami");
  await get("/s3/config", "/s3/config");
  const up = await post("/s3/presign", { direction: "upload", filename: "a.txt", group: "oa" });
  await fetch(up.url, { method: "PUT", body: "hello" });
  await post("/s3/presign", { direction: "download", path: up.path });
  await post("/s3/presign", { direction: "upload", filename: "..", group: "oa" });
  await post("/s3/presign/batch", { direction: "upload", items: [{ filename: "b", group: "oa" }] });
  await post("/s3/presign/upload-dir", { group: "oa", relpaths: ["x/y.txt"] });
  await get(`/s3/list?prefix=${encodeURIComponent("s3://resources/oa/")}`, "/s3/list");
  await get(`/s3/parquet?path=${encodeURIComponent(up.path)}`, "/s3/parquet");
  await get(`/s3/parquet?path=${encodeURIComponent("s3://resources/missing.parquet")}`, "/s3/parquet");
  await post("/admin/materialized-views/refresh", {});
});
afterAll(async () => {
  await srv?.close();
});

describe("real REST answers validate against /openapi.json", () => {
  it("recorded successes and errors on every REST path of the document", () => {
    const used = new Set(exchanges.map((e) => `${e.method} ${e.template}`));
    const declared = Object.entries(doc.paths as Record<string, Record<string, unknown>>)
      .filter(([p]) => !p.startsWith("/v1/") && !p.startsWith("/v2/"))
      .flatMap(([p, ops]) =>
        Object.keys(ops)
          .filter((m) => ["get", "post"].includes(m))
          .map((m) => `${m} ${p}`),
      );
    // The three streamed answers are not JSON documents: parquet bytes, a dump's gzip bytes, and the change feed's Server-Sent Events.
    expect([...used].sort()).toEqual(
      declared.filter((d) => !d.includes("/query/parquet") && d !== "get /admin/dump" && d !== "get /events").sort(),
    );
    expect(exchanges.some((e) => e.status === 200)).toBe(true);
    expect(new Set(exchanges.filter((e) => e.status !== 200).map((e) => e.status))).toEqual(new Set([400, 404]));
  });

  it("each answer matches the schema of its path, method and status", () => {
    const ajv = strictAjv({ allowUnionTypes: true });
    ajv.addKeyword("discriminator");
    const rewrite = (x: unknown) =>
      JSON.parse(JSON.stringify(x).replaceAll('"#/components/schemas/', '"urn:test:oa#/$defs/'));
    ajv.addSchema({ $id: "urn:test:oa", $defs: rewrite(doc.components.schemas) });
    const failures: string[] = [];
    for (const e of exchanges) {
      let response = doc.paths[e.template]?.[e.method]?.responses?.[String(e.status)];
      if (response?.$ref) response = doc.components.responses[response.$ref.split("/").pop()];
      const schema = response?.content?.["application/json"]?.schema;
      if (!schema) {
        failures.push(`${e.method} ${e.template} ${e.status}: no schema in the document`);
        continue;
      }
      const validate = ajv.compile(rewrite(schema));
      if (!validate(e.body))
        failures.push(
          `${e.method} ${e.template} ${e.status}: ${ajv.errorsText(validate.errors)} in ${JSON.stringify(e.body).slice(0, 300)}`,
        );
    }
    expect(failures).toEqual([]);
  });
});
