// The read audit on every surface (docs/contract/19-audit-history.md): each
// audited method over Connect, gRPC and gRPC-Web, on both revisions where it
// exists, writes exactly one line naming the method of its revision, the
// identifiers the caller was answered (only those: not the ones it asked for
// and may not see) and their count, or for queries, counts, statistics and
// streams the request and the row count; never a payload value or an
// external uid. When the line cannot be written the call fails `unavailable`
// on every surface, streams included, and answers nothing.
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ArtefactService } from "../../gen/resourcestore/v1/artefact_service_pb.js";
import { LineageService as LineageServiceV1 } from "../../gen/resourcestore/v1/lineage_service_pb.js";
import { ResourceService as ResourceServiceV1 } from "../../gen/resourcestore/v1/resource_service_pb.js";
import { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";
import { LineageService } from "../../gen/resourcestore/v2/lineage_service_pb.js";
import { QueryService } from "../../gen/resourcestore/v2/query_service_pb.js";
import { RegistryService } from "../../gen/resourcestore/v2/registry_service_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { StatsService } from "../../gen/resourcestore/v2/stats_service_pb.js";
import { startTestServer, type TestServer } from "../support/app.js";

const UID = "EXTERNAL-UID-4417";
const SECRET_VALUE = "PAYLOAD-VALUE-8830";
const FULL = { authorization: "Bearer tok-all" };
const ONLY_A = { authorization: "Bearer tok-a" };

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

type Wire = "connect" | "grpc" | "grpc-web";
const WIRES: readonly Wire[] = ["connect", "grpc", "grpc-web"];

function transportOf(srv: TestServer, wire: Wire): Transport {
  if (wire === "grpc") return createGrpcTransport({ baseUrl: srv.url });
  if (wire === "grpc-web") return createGrpcWebTransport({ baseUrl: srv.url, httpVersion: "1.1" });
  return createConnectTransport({ baseUrl: srv.url, httpVersion: "1.1" });
}

async function failure(p: Promise<unknown>): Promise<ConnectError | "answered"> {
  try {
    await p;
    return "answered";
  } catch (err) {
    if (!(err instanceof ConnectError)) throw err;
    return err;
  }
}

/** Reads a server stream to its end or its error; answers the messages taken and the error. */
async function drain(
  stream: AsyncIterable<unknown>,
  max: number,
): Promise<{ messages: number; error: ConnectError | undefined }> {
  let messages = 0;
  try {
    for await (const _ of stream) if (++messages >= max) break;
    return { messages, error: undefined };
  } catch (err) {
    if (!(err instanceof ConnectError)) throw err;
    return { messages, error: err };
  }
}

describe("read audit lines on every surface and revision", () => {
  let srv: TestServer;
  let fail = false;
  const written: string[] = [];
  const lines = (): Line[] => written.map((l) => JSON.parse(l) as Line);
  /** The one line a call added (written before its answer: it is there when the answer is). */
  const lineOf = async (call: () => Promise<unknown>): Promise<Line> => {
    const before = written.length;
    await call();
    expect(written.length).toBe(before + 1);
    return lines()[before] as Line;
  };

  beforeAll(async () => {
    srv = await startTestServer(
      { API_TOKENS: "tok-all=read,write,actor:auditor;tok-a=read,write,datasource:ds-a,actor:narrow" },
      {
        auditSink: (line) => {
          if (fail) return Promise.reject(new Error("disk full"));
          written.push(line);
          return Promise.resolve();
        },
      },
    );
    const res = await fetch(`${srv.url}/resources/create`, {
      method: "POST",
      headers: { ...FULL, "content-type": "application/json" },
      body: JSON.stringify({
        resources: [
          { identifier: "ds-a", payload_type: "datasource", name: "A", description: SECRET_VALUE },
          { identifier: "ds-b", payload_type: "datasource", name: "B" },
          // A resource's datasource is its patient's (docs/contract/18-access.md).
          { identifier: "pa-a", payload_type: "patient", parent_identifier: "ds-a", datasource_id: "ds-a" },
          { identifier: "pa-b", payload_type: "patient", parent_identifier: "ds-b", datasource_id: "ds-b" },
          { identifier: "st-1", payload_type: "study", parent_identifier: "pa-a", description: SECRET_VALUE },
          { identifier: "st-2", payload_type: "study", parent_identifier: "pa-a" },
          { identifier: "sb-1", payload_type: "study", parent_identifier: "pa-b", description: SECRET_VALUE },
          {
            identifier: "ar-1",
            payload_type: "artefact",
            parent_identifier: "ds-a",
            repo: "r",
            branch: "main",
            path: "m.onnx",
            status: "succeeded",
          },
        ],
      }),
    });
    expect(res.status).toBe(200);
    const upd = await fetch(`${srv.url}/resources/update`, {
      method: "POST",
      headers: { ...FULL, "content-type": "application/json" },
      body: JSON.stringify({ updates: { "st-1": { license: "MIT" } } }),
    });
    expect(upd.status).toBe(200);
    // Writes write no line.
    expect(written).toEqual([]);
  }, 60_000);
  afterAll(async () => srv?.close());

  for (const wire of WIRES) {
    it(`names the identifiers answered for every identifier-answering method over ${wire}`, async () => {
      const t = transportOf(srv, wire);
      const h = { headers: FULL };
      const v1 = "resourcestore.v1.";
      const v2 = "resourcestore.v2.";
      const cases: [string, () => Promise<unknown>, string[]][] = [
        [
          `${v2}ResourceService/Read`,
          () => createClient(ResourceService, t).read({ identifiers: ["st-2", "nope", "st-1", "st-2"] }, h),
          ["st-2", "st-1"],
        ],
        [
          `${v1}ResourceService/Read`,
          () => createClient(ResourceServiceV1, t).read({ identifiers: ["st-1"] }, h),
          ["st-1"],
        ],
        [
          `${v2}ResourceService/History`,
          () => createClient(ResourceService, t).history({ identifier: "st-1" }, h),
          ["st-1"],
        ],
        [
          `${v1}ResourceService/History`,
          () => createClient(ResourceServiceV1, t).history({ identifier: "st-1", limit: 1 }, h),
          ["st-1"],
        ],
        [
          `${v1}LineageService/Children`,
          () => createClient(LineageServiceV1, t).children({ parentIdentifier: "pa-a", withPayloads: true }, h),
          ["st-1", "st-2"],
        ],
        [
          `${v2}LineageService/Parents`,
          () => createClient(LineageService, t).parents({ identifier: "st-2" }, h),
          ["pa-a", "ds-a"],
        ],
        [
          `${v1}LineageService/Parents`,
          () => createClient(LineageServiceV1, t).parents({ identifier: "sb-1" }, h),
          ["pa-b", "ds-b"],
        ],
        [
          `${v1}ArtefactService/Latest`,
          () => createClient(ArtefactService, t).latest({ repo: "r", branch: "main", path: "m.onnx" }, h),
          ["ar-1"],
        ],
      ];
      for (const [method, call, ids] of cases) {
        const line = await lineOf(call);
        expect(line, method).toMatchObject({ method, actor: "auditor", outcome: "ok", count: ids.length });
        expect([...(line.identifiers ?? [])].sort(), method).toEqual([...ids].sort());
        expect(line.request, method).toBeUndefined();
      }
    });

    it(`lists only what a restricted caller was answered over ${wire}`, async () => {
      const t = transportOf(srv, wire);
      const h = { headers: ONLY_A };
      const read = await lineOf(() =>
        createClient(ResourceService, t).read({ identifiers: ["sb-1", "st-1", "ds-b"] }, h),
      );
      expect(read).toMatchObject({ actor: "narrow", outcome: "ok", identifiers: ["st-1"], count: 1 });
      // A history of a resource it may not see is not_found: no identifier answered.
      const hist = await lineOf(() => failure(createClient(ResourceService, t).history({ identifier: "sb-1" }, h)));
      expect(hist).toMatchObject({ actor: "narrow", outcome: "not_found", identifiers: [], count: 0 });
      const children = await lineOf(() =>
        createClient(LineageServiceV1, t)
          .children({ parentIdentifier: "pa-b" }, h)
          .catch(() => undefined),
      );
      expect(children.identifiers).toEqual([]);
      expect(children.count).toBe(0);
    });

    it(`carries the request and the row count for queries, counts, statistics and streams over ${wire}`, async () => {
      const t = transportOf(srv, wire);
      const h = { headers: FULL };
      const q = createClient(QueryService, t);
      const query = await lineOf(() => q.query({ payloadType: "study", parentIdentifier: "pa-a" }, h));
      expect(query).toMatchObject({
        method: "resourcestore.v2.QueryService/Query",
        request: { payload_type: "study", parent_identifier: "pa-a" },
        count: 2,
      });
      expect(query.identifiers).toBeUndefined();
      expect(await lineOf(() => q.count({ payloadType: "study" }, h))).toMatchObject({
        method: "resourcestore.v2.QueryService/Count",
        request: { payload_type: "study" },
        count: 3,
      });
      const narrow = await lineOf(() => q.count({ payloadType: "study" }, { headers: ONLY_A }));
      expect(narrow).toMatchObject({ actor: "narrow", count: 2 });
      const stats = createClient(StatsService, t);
      expect(await lineOf(() => stats.stats({}, h))).toMatchObject({
        method: "resourcestore.v2.StatsService/Stats",
        request: {},
        outcome: "ok",
      });
      expect(await lineOf(() => stats.detailedStats({ datasourceId: "ds-a" }, h))).toMatchObject({
        method: "resourcestore.v2.StatsService/DetailedStats",
        request: { datasource_id: "ds-a" },
        outcome: "ok",
      });
      // A stream's line is written when it starts, before its first byte: the request, count null.
      const parquet = await lineOf(() => drain(q.queryParquet({ payloadType: "study" }, h), 1000));
      expect(parquet).toMatchObject({
        method: "resourcestore.v2.QueryService/QueryParquet",
        request: { payload_type: "study" },
        count: null,
      });
      const abort = new AbortController();
      const before = written.length;
      const watching = drain(
        createClient(EventService, t).watch({ payloadTypes: ["study"] }, { ...h, signal: abort.signal }),
        1,
      );
      for (let i = 0; i < 100 && written.length === before; i++) await new Promise((r) => setTimeout(r, 50));
      abort.abort();
      await watching;
      expect(written.length).toBe(before + 1);
      expect(lines()[before]).toMatchObject({
        method: "resourcestore.v2.EventService/Watch",
        request: { payload_types: ["study"] },
        count: null,
      });
    });

    it(`lists a registry call's identifier and never its external uid over ${wire}`, async () => {
      const r = createClient(RegistryService, transportOf(srv, wire));
      const h = { headers: FULL };
      const uid = `${UID}-${wire}`;
      const reg = await r.registerPatient({ datasourceId: "ds-a", externalUid: uid }, h);
      expect(lines().at(-1)).toMatchObject({
        method: "resourcestore.v2.RegistryService/RegisterPatient",
        identifiers: [reg.identifier],
        count: 1,
      });
      expect(await lineOf(() => r.resolvePatient({ datasourceId: "ds-a", externalUid: uid }, h))).toMatchObject({
        identifiers: [reg.identifier],
        count: 1,
      });
      const study = await r.registerStudy({ patientIdentifier: reg.identifier, externalUid: `${uid}-s` }, h);
      expect(lines().at(-1)).toMatchObject({
        method: "resourcestore.v2.RegistryService/RegisterStudy",
        identifiers: [study.identifier],
        count: 1,
      });
      const resolved = await lineOf(() =>
        r.resolveStudy({ patientIdentifier: reg.identifier, externalUid: `${uid}-s` }, h),
      );
      expect(resolved).toMatchObject({
        method: "resourcestore.v2.RegistryService/ResolveStudy",
        identifiers: [study.identifier],
        count: 1,
      });
      for (const l of lines())
        expect(l.request).not.toEqual(expect.objectContaining({ external_uid: expect.anything() }));
    });
  }

  it("wrote no payload value and no external uid in any line", () => {
    const text = written.join("");
    expect(written.length).toBeGreaterThan(40);
    expect(text).not.toContain(SECRET_VALUE);
    expect(text).not.toContain(UID);
    expect(text).not.toContain('m.onnx","status');
  });

  for (const wire of WIRES) {
    it(`fails every audited call unavailable, answering nothing, when its line cannot be written, over ${wire}`, async () => {
      const t = transportOf(srv, wire);
      const h = { headers: FULL };
      fail = true;
      try {
        const unary: [string, () => Promise<unknown>][] = [
          ["Read", () => createClient(ResourceService, t).read({ identifiers: ["st-1"] }, h)],
          ["v1 History", () => createClient(ResourceServiceV1, t).history({ identifier: "st-1" }, h)],
          ["Query", () => createClient(QueryService, t).query({ payloadType: "study" }, h)],
          ["Children", () => createClient(LineageServiceV1, t).children({ parentIdentifier: "pa-a" }, h)],
          [
            "ResolvePatient",
            () =>
              createClient(RegistryService, t).resolvePatient(
                { datasourceId: "ds-a", externalUid: `${UID}-${wire}` },
                h,
              ),
          ],
        ];
        for (const [name, call] of unary) {
          const err = await failure(call());
          expect(err, name).toBeInstanceOf(ConnectError);
          expect((err as ConnectError).code, name).toBe(Code.Unavailable);
          expect((err as ConnectError).rawMessage, name).not.toContain("st-1");
        }
        for (const [name, stream] of [
          ["QueryParquet", createClient(QueryService, t).queryParquet({ payloadType: "study" }, h)],
          ["Watch", createClient(EventService, t).watch({ since: "2000-01-01T00:00:00Z" }, h)],
        ] as const) {
          const { messages, error } = await drain(stream, 1);
          expect(messages, name).toBe(0);
          expect(error?.code, name).toBe(Code.Unavailable);
        }
      } finally {
        fail = false;
      }
    });
  }
});
