// The read audit (docs/contract/19-audit-history.md): with AUDIT_LOG set,
// each call that returns, counts or exports resources, and each registry
// call, has one line, written before its answer, naming the identifiers
// answered and their count (or the request and the row count), and never a
// payload value or an external uid. A line that cannot be written fails the
// call `unavailable` with nothing answered.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { startTestServer, type TestServer } from "../support/app.js";

const UID = "EXTERNAL-UID-7731";
const SECRET_VALUE = "PAYLOAD-VALUE-5519";

interface Line {
  at: string;
  actor: string;
  method: string;
  request_id: string | null;
  outcome: string;
  identifiers?: string[];
  request?: unknown;
  count: number | null;
}

describe("read audit lines", () => {
  let dir: string;
  let file: string;
  let srv: TestServer;
  const lines = async (): Promise<Line[]> =>
    (await readFile(file, "utf8").catch(() => ""))
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => JSON.parse(l) as Line);
  const call = async (
    method: "GET" | "POST",
    path: string,
    body?: unknown,
  ): Promise<{ status: number; text: string }> => {
    const res = await fetch(srv.url + path, {
      method,
      headers: {
        authorization: "Bearer tok",
        "x-request-id": "req-1",
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, text: Buffer.from(await res.arrayBuffer()).toString("latin1") };
  };
  /** The one line a call added (written before the answer: it is there when the answer is). */
  const lineOf = async (
    method: "GET" | "POST",
    path: string,
    body?: unknown,
  ): Promise<{ status: number; line: Line; text: string }> => {
    const before = (await lines()).length;
    const { status, text } = await call(method, path, body);
    const after = await lines();
    expect(after.length).toBe(before + 1);
    return { status, text, line: after[after.length - 1] as Line };
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "rs-audit-"));
    file = join(dir, "audit.log");
    srv = await startTestServer({ API_TOKENS: "tok=read,write,actor:auditor", AUDIT_LOG: file });
    const w = await call("POST", "/resources/create", {
      resources: [
        { identifier: "ds-a", payload_type: "datasource", name: "A", description: SECRET_VALUE },
        { identifier: "st-1", payload_type: "study", parent_identifier: "ds-a", description: SECRET_VALUE },
        { identifier: "st-2", payload_type: "study", parent_identifier: "ds-a" },
        {
          identifier: "ar-1",
          payload_type: "artefact",
          repo: "r",
          branch: "main",
          path: "m.onnx",
          status: "succeeded",
        },
      ],
    });
    expect(w.status).toBe(200);
  }, 60_000);
  afterAll(async () => {
    await srv?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("names the identifiers answered and their count, for every read path", async () => {
    const cases: [method: "GET" | "POST", path: string, body: unknown, rpc: string, ids: string[]][] = [
      [
        "POST",
        "/resources/read",
        { identifiers: ["st-1", "nope", "st-2", "st-1"] },
        "ResourceService/Read",
        ["st-1", "st-2"],
      ],
      ["POST", "/v2/resources/history", { identifier: "st-1" }, "ResourceService/History", ["st-1"]],
      ["GET", "/children?parent_identifier=ds-a", undefined, "LineageService/Children", ["st-1", "st-2"]],
      ["GET", "/parents/st-2", undefined, "LineageService/Parents", ["ds-a"]],
      ["GET", "/v1/artefacts/latest?repo=r&branch=main&path=m.onnx", undefined, "ArtefactService/Latest", ["ar-1"]],
    ];
    for (const [method, path, body, rpc, ids] of cases) {
      const { status, line } = await lineOf(method, path, body);
      expect(status, path).toBe(200);
      expect(line.method.endsWith(rpc), path).toBe(true);
      expect(line, path).toMatchObject({
        actor: "auditor",
        outcome: "ok",
        request_id: "req-1",
        identifiers: ids,
        count: ids.length,
      });
      expect(Number.isNaN(Date.parse(line.at))).toBe(false);
    }
  });

  it("carries the request and the row count for queries, counts, exports and statistics", async () => {
    const q = { payload_type: "study", parent_identifier: "ds-a" };
    const query = await lineOf("POST", "/query", q);
    expect(query.line).toMatchObject({ method: "resourcestore.v2.QueryService/Query", request: q, count: 2 });
    expect(query.line.identifiers).toBeUndefined();
    expect((await lineOf("POST", "/query/count", q)).line).toMatchObject({ request: q, count: 2 });
    const exp = await lineOf("POST", "/query/parquet", q);
    expect(exp.status).toBe(200);
    expect(exp.line).toMatchObject({ method: "resourcestore.v2.QueryService/QueryParquet", request: q, count: null });
    expect((await lineOf("GET", "/datasources/stats")).line).toMatchObject({
      method: "resourcestore.v2.StatsService/Stats",
      count: 0,
    });
  });

  it("lists the identifier a registry call answered, never the external uid", async () => {
    const reg = await lineOf("POST", "/patients/register", { datasource_id: "ds-a", external_uid: UID });
    expect(reg.status).toBe(200);
    const patient = (JSON.parse(reg.text) as { identifier: string }).identifier;
    expect(reg.line).toMatchObject({
      method: "resourcestore.v2.RegistryService/RegisterPatient",
      identifiers: [patient],
      count: 1,
    });
    expect(reg.line.request).toBeUndefined();
    const res = await lineOf("POST", "/patients/resolve", { datasource_id: "ds-a", external_uid: UID });
    expect(res.line).toMatchObject({ identifiers: [patient], count: 1 });
    const study = await lineOf("POST", "/studies/register", { patient_identifier: patient, external_uid: `${UID}-s` });
    expect(study.line.identifiers).toEqual([(JSON.parse(study.text) as { identifier: string }).identifier]);
    // A refused registry call says how it ended, still without the uid.
    const again = await lineOf("POST", "/patients/register", { datasource_id: "ds-a", external_uid: UID });
    expect(again.status).toBe(400);
    expect(again.line).toMatchObject({ outcome: "failed_precondition", identifiers: [], count: 0 });
  });

  it("caps the identifiers at 1,000 and counts them all", async () => {
    const ids = Array.from({ length: 1200 }, (_, i) => `bulk-${String(i).padStart(4, "0")}`);
    const w = await call("POST", "/resources/create", {
      resources: ids.map((identifier) => ({ identifier, payload_type: "study" })),
    });
    expect(w.status).toBe(200);
    const { line } = await lineOf("POST", "/resources/read", { identifiers: ids, exclude_children: true });
    expect(line.identifiers).toEqual(ids.slice(0, 1000));
    expect(line.count).toBe(1200);
  });

  it("writes no payload value and no external uid, and no line for writes", async () => {
    const text = await readFile(file, "utf8");
    expect(text).not.toContain(SECRET_VALUE);
    expect(text).not.toContain(UID);
    expect(text).not.toContain("ResourceService/Create");
  });

  it("fails a call unavailable, answering nothing, when its line cannot be written", async () => {
    await rm(dir, { recursive: true, force: true });
    const read = await call("POST", "/resources/read", { identifiers: ["st-1"] });
    expect(read.status).toBe(503);
    expect(JSON.parse(read.text)).toMatchObject({ code: "unavailable", reason: "AUDIT_UNAVAILABLE" });
    expect(read.text).not.toContain("st-1");
    const exp = await call("POST", "/query/parquet", { payload_type: "study" });
    expect(exp.status).toBe(503);
    expect(exp.text).not.toContain("PAR1");
  });
});

describe("a failing audit writer", () => {
  let srv: TestServer;
  let fail = false;
  const written: string[] = [];
  beforeAll(async () => {
    srv = await startTestServer(
      {},
      {
        auditSink: (line) => {
          if (fail) return Promise.reject(new Error("disk full"));
          written.push(line);
          return Promise.resolve();
        },
      },
    );
  }, 60_000);
  afterAll(async () => srv?.close());

  it("fails the call unavailable over gRPC, answering nothing", async () => {
    const client = createClient(ResourceService, createGrpcTransport({ baseUrl: srv.url }));
    await client.create({ resources: [{ identifier: "g1", payload: { case: "datasource", value: { name: "G" } } }] });
    expect((await client.read({ identifiers: ["g1"] })).resources).toHaveLength(1);
    expect(written.map((l) => (JSON.parse(l) as Line).actor)).toEqual(["local"]);
    fail = true;
    const err = await client.read({ identifiers: ["g1"] }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
    const hist = await client.history({ identifier: "g1" }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((hist as ConnectError).code).toBe(Code.Unavailable);
  });
});
