// Every RPC of both revisions over three protocols — gRPC (binary, grpc-js
// over HTTP/2), Connect JSON and REST — with the same inputs: the answers
// agree (after putting REST's flat resources and counts into proto JSON
// form) and so do the error codes for the same bad input. The scenario table
// must name every method the descriptors declare, so a new RPC cannot be
// left out.
import { gunzipSync } from "node:zlib";
import * as grpc from "@grpc/grpc-js";
import { fromBinary, fromJson, getOption, toBinary, toJson, type DescMethod, type JsonValue } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { parquetReadObjects } from "hyparquet";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { http } from "../../gen/google/api/annotations_pb.js";
import { revisions } from "../../src/rpc/index.js";
import { payloadTypeNames } from "../../src/schema/payload-registry.js";
import { startTestServer, type TestServer } from "../support/app.js";

type Protocol = "grpc" | "connect" | "rest";
const PROTOCOLS: readonly Protocol[] = ["grpc", "connect", "rest"];
type Outcome = { ok: JsonValue } | { error: string };

let srv: TestServer;
beforeAll(async () => {
  srv = await startTestServer();
});
afterAll(async () => {
  await srv?.close();
});

const codeName = (c: number): string =>
  (Code[c] ?? "unknown").replace(/[A-Z]/g, (m, i) => (i ? "_" : "") + m.toLowerCase());

/** Proto-JSON request -> answer over one protocol, as proto JSON with proto field names. */
async function call(
  p: Protocol,
  method: DescMethod,
  req: Record<string, unknown>,
  restReq?: Record<string, unknown>,
): Promise<Outcome> {
  const service = method.parent;
  const path = `/${service.typeName}/${method.name}`;
  const streaming = method.methodKind === "server_streaming";
  if (method.name === "Watch") return firstEvents(p, method, req);
  if (p === "grpc") {
    const client = new grpc.Client(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure());
    const msg = fromJson(method.input, req as JsonValue);
    const ser = (m: typeof msg) => Buffer.from(toBinary(method.input, m));
    const de = (b: Buffer) => fromBinary(method.output, b);
    try {
      if (streaming) {
        const chunks: Uint8Array[] = [];
        await new Promise<void>((resolve, reject) => {
          const s = client.makeServerStreamRequest(path, ser, de, msg);
          s.on("data", (m: { data: Uint8Array }) => chunks.push(m.data));
          s.on("error", reject);
          s.on("end", resolve);
        });
        return { ok: await streamedBody(method, Buffer.concat(chunks)) };
      }
      const out = await new Promise<unknown>((resolve, reject) =>
        client.makeUnaryRequest(path, ser, de, msg, (err, res) => (err ? reject(err) : resolve(res))),
      );
      return { ok: toJson(method.output, out as never, { useProtoFieldName: true }) };
    } catch (err) {
      return { error: codeName((err as grpc.ServiceError).code) };
    } finally {
      client.close();
    }
  }
  if (p === "connect") {
    if (streaming) {
      // The Connect streaming protocol frames messages: read them with the envelope format.
      const body = Buffer.from(JSON.stringify(req));
      const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), body]);
      frame.writeUInt32BE(body.length, 1);
      const res = await fetch(srv.url + path, {
        method: "POST",
        headers: { "content-type": "application/connect+json" },
        body: frame,
      });
      const buf = Buffer.from(await res.arrayBuffer());
      const chunks: Buffer[] = [];
      for (let o = 0; o < buf.length;) {
        const flags = buf[o]!;
        const len = buf.readUInt32BE(o + 1);
        const payload = buf.subarray(o + 5, o + 5 + len);
        o += 5 + len;
        const json = JSON.parse(payload.toString("utf8"));
        if (flags & 2) {
          if (json.error) return { error: json.error.code };
          continue;
        }
        chunks.push(Buffer.from(json.data ?? "", "base64"));
      }
      return { ok: await streamedBody(method, Buffer.concat(chunks)) };
    }
    const res = await fetch(srv.url + path, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(req),
    });
    const json = (await res.json()) as JsonValue;
    return res.ok ? { ok: json } : { error: (json as { code: string }).code };
  }
  // REST: path and method from the http rule; path variables and GET query parameters from the request.
  const rule = getOption(method, http);
  const verb = rule.pattern.case!;
  const template = rule.pattern.value as string;
  let restPath = template.replace(/\{(\w+)\}/g, (_, k: string) => encodeURIComponent(String(req[k])));
  const body = restReq ?? req;
  const init: RequestInit = { method: verb.toUpperCase() };
  if (verb === "get") {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(req)) if (!template.includes(`{${k}}`)) q.set(k, String(v));
    if ([...q].length) restPath += `?${q.toString()}`;
  } else {
    init.headers = { "content-type": "application/json" };
    init.body = JSON.stringify(body);
  }
  const res = await fetch(`${srv.url}/${service.typeName.split(".")[1]}${restPath}`, init);
  if (streaming) {
    if (!res.ok) return { error: ((await res.json()) as { code: string }).code };
    return { ok: await streamedBody(method, Buffer.from(await res.arrayBuffer())) };
  }
  const json = (await res.json()) as JsonValue;
  if (!res.ok) return { error: (json as { code: string }).code };
  return { ok: rule.responseBody ? { [rule.responseBody]: json } : json };
}

/**
 * The change feed never ends by itself: each protocol reads until the first
 * message that holds events (a replay of the scenario's commits) and stops.
 */
async function firstEvents(p: Protocol, method: DescMethod, req: Record<string, unknown>): Promise<Outcome> {
  const path = `/${method.parent.typeName}/${method.name}`;
  const withEvents = (m: { events?: unknown[] }) => (m.events?.length ?? 0) > 0;
  if (p === "grpc") {
    const client = new grpc.Client(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure());
    const msg = fromJson(method.input, req as JsonValue);
    try {
      return await new Promise<Outcome>((resolve) => {
        const s = client.makeServerStreamRequest(
          path,
          (m: typeof msg) => Buffer.from(toBinary(method.input, m)),
          (b: Buffer) => fromBinary(method.output, b),
          msg,
        );
        s.on("data", (m: ReturnType<typeof fromBinary>) => {
          const json = toJson(method.output, m as never, { useProtoFieldName: true }) as { events?: unknown[] };
          if (!withEvents(json)) return;
          resolve({ ok: json as JsonValue });
          s.cancel();
        });
        s.on("error", (err: grpc.ServiceError) => resolve({ error: codeName(err.code) }));
      });
    } finally {
      client.close();
    }
  }
  const abort = new AbortController();
  try {
    let res: Response;
    if (p === "connect") {
      const body = Buffer.from(JSON.stringify(req));
      const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), body]);
      frame.writeUInt32BE(body.length, 1);
      res = await fetch(srv.url + path, {
        method: "POST",
        headers: { "content-type": "application/connect+json" },
        body: frame,
        signal: abort.signal,
      });
    } else {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(req)) {
        if (k === "payload_types") for (const t of v as string[]) q.append("payload_type", t);
        else q.set(k, String(v));
      }
      res = await fetch(`${srv.url}/${method.parent.typeName.split(".")[1]}/events?${q.toString()}`, {
        signal: abort.signal,
      });
      if (!res.ok) return { error: ((await res.json()) as { code: string }).code };
    }
    const reader = res.body!.getReader();
    let buf = Buffer.alloc(0);
    for (;;) {
      const r = await reader.read();
      if (r.done) return { error: "ended without events" };
      buf = Buffer.concat([buf, r.value]);
      if (p === "connect") {
        while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
          const len = buf.readUInt32BE(1);
          const json = JSON.parse(buf.subarray(5, 5 + len).toString("utf8"));
          const end = (buf[0]! & 2) !== 0;
          buf = buf.subarray(5 + len);
          if (end) return json.error ? { error: json.error.code } : { error: "ended without events" };
          if (withEvents(json)) return { ok: json };
        }
      } else {
        // Server-Sent Events: messages end with a blank line; data lines hold the flat JSON.
        let at: number;
        while ((at = buf.indexOf("\n\n")) >= 0) {
          const block = buf.subarray(0, at).toString("utf8");
          buf = buf.subarray(at + 2);
          const data = block
            .split("\n")
            .filter((l) => l.startsWith("data:"))
            .map((l) => l.slice(5).trim())
            .join("\n");
          if (data === "") continue;
          const json = JSON.parse(data);
          if (withEvents(json)) return { ok: json };
        }
      }
    }
  } finally {
    abort.abort();
  }
}

/** A streamed answer's bytes in comparable form: an online dump's header and trailer shape, else the parquet rows. */
async function streamedBody(method: DescMethod, buf: Buffer): Promise<JsonValue> {
  if (method.name !== "Dump") return parquetRows(buf);
  // The stores differ by what each protocol's earlier scenarios wrote: compare the file's shape, not its rows.
  const lines = gunzipSync(buf).toString("utf8").trimEnd().split("\n");
  const header = JSON.parse(lines[0] ?? "null") as Record<string, JsonValue>;
  const trailer = JSON.parse(lines[lines.length - 1] ?? "null") as Record<string, JsonValue>;
  return {
    record: header["record"] ?? null,
    format: header["format"] ?? null,
    format_version: header["format_version"] ?? null,
    since: header["since"] ?? null,
    sections: header["sections"] ?? null,
    last: trailer["record"] ?? null,
  };
}

async function parquetRows(buf: Buffer): Promise<JsonValue> {
  const ab = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength) as ArrayBuffer;
  const rows = await parquetReadObjects({ file: ab });
  return JSON.parse(JSON.stringify(rows, (_k, v) => (typeof v === "bigint" ? String(v) : v)));
}

/** One comparable form: flat resources, numbers as strings, no empty or volatile values. */
function normalize(v: unknown, tag: string): unknown {
  if (Array.isArray(v)) return v.map((x) => normalize(x, tag));
  if (typeof v === "number") return String(v);
  if (typeof v === "string") {
    return v
      .replaceAll(tag, "P")
      .replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z/g, "<ts>")
      .replace(/\b(pat|stu)_[0-9a-f]{32}\b/g, "$1_X")
      .replace(/^https?:\/\/\S+$/, "<url>")
      .replace(/\/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\//g, "/<id>/")
      .replace(/\/[0-9a-f]{32}\//g, "/<id>/");
  }
  if (v === null || typeof v !== "object") return v;
  const o = { ...(v as Record<string, unknown>) };
  // A proto-JSON resource carries its payload in the oneof member; REST is flat.
  for (const t of payloadTypeNames) {
    if ("identifier" in o && typeof o[t] === "object" && o[t] !== null && !Array.isArray(o[t])) {
      Object.assign(o, o[t], { payload_type: t });
      delete o[t];
    }
  }
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(o)) {
    if (k === "cursor" || k === "next_cursor") {
      if (x !== null) out[k] = "<cursor>";
      continue;
    }
    const y = normalize(x, tag);
    // Proto JSON leaves out default values (0, false, "", [], {}) that REST
    // writes; compare without them.
    if (y === null || y === "0" || y === false || y === "") continue;
    if (Array.isArray(y) && y.length === 0) continue;
    if (typeof y === "object" && !Array.isArray(y) && Object.keys(y).length === 0) continue;
    out[k] = y;
  }
  return out;
}

interface Scenario {
  /** A valid request for protocol tag t (identifiers carry t so mutations do not collide). */
  ok(t: string): { req: Record<string, unknown>; rest?: Record<string, unknown> };
  /** A request every protocol must answer alike: refused with the same code (or, where nothing can be wrong, the same answer). */
  bad: Record<string, unknown>;
  /** Written before each protocol's ok call (tag t). */
  setup?(t: string): Promise<void>;
}

async function rest(path: string, body: unknown): Promise<any> {
  const res = await fetch(srv.url + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return res.json();
}
const tree = (t: string) => [
  { identifier: `${t}-ds`, payload_type: "datasource", name: "DS" },
  {
    identifier: `${t}-pat`,
    parent_identifier: `${t}-ds`,
    payload_type: "patient",
    datasource_id: `${t}-dsid`,
    sex: "other",
  },
  { identifier: `${t}-st`, parent_identifier: `${t}-pat`, payload_type: "study", modality: "CT" },
  {
    identifier: `${t}-f`,
    parent_identifier: `${t}-st`,
    payload_type: "file",
    path: "s3://resources/x",
    size_bytes: "12",
  },
  {
    identifier: `${t}-art`,
    payload_type: "artefact",
    repo: `${t}/r`,
    branch: "main",
    path: "m.onnx",
    status: "succeeded",
  },
];
/** Uploads bytes through a presigned URL under g/t/ and answers the object's s3:// path. */
async function upload(t: string, filename: string, bytes: Uint8Array): Promise<string> {
  const { url, path } = await rest("/s3/presign", { direction: "upload", filename, group: `g/${t}` });
  const put = await fetch(url, { method: "PUT", body: bytes });
  if (!put.ok) throw new Error(`upload failed: ${put.status}`);
  return path as string;
}
const parquetPaths = new Map<string, string>();
const seedTree = async (t: string) => {
  const r = await rest("/resources/create", { resources: tree(t) });
  if (r.created !== 5) throw new Error(`seed failed: ${JSON.stringify(r)}`);
};

/** Watch replays from just before its tag's commits: the stamp of a marker written first. */
const watchSince = new Map<string, string>();
const seedHistory = async (t: string) => {
  await rest("/resources/create", { resources: [{ identifier: `${t}-mark`, payload_type: "datasource", name: "M" }] });
  const [mark] = (await rest("/resources/read", { identifiers: [`${t}-mark`] })) as { updated_at: string }[];
  watchSince.set(t, mark!.updated_at);
  await seedTree(t);
  await rest("/resources/update", { updates: { [`${t}-st`]: { modality: "MR" } } });
  await rest("/resources/delete", { identifiers: [`${t}-f`] });
};

const scenarios: Record<string, Scenario> = {
  "EventService.Watch": {
    setup: seedHistory,
    ok: (t) => ({ req: { since: watchSince.get(t), root_identifier: `${t}-ds`, include_resources: true } }),
    bad: { payload_types: ["no_such_type"] },
  },
  "ResourceService.Create": {
    ok: (t) => ({
      req: {
        resources: [
          { identifier: `${t}-c1`, study: { modality: "MR" } },
          { identifier: `${t}-c2`, parent_identifier: `${t}-c1`, series: { series_number: 2 } },
        ],
      },
      rest: {
        resources: [
          { identifier: `${t}-c1`, payload_type: "study", modality: "MR" },
          { identifier: `${t}-c2`, parent_identifier: `${t}-c1`, payload_type: "series", series_number: 2 },
        ],
      },
    }),
    bad: { resources: [{ identifier: "bad id!", study: {} }] },
  },
  "ResourceService.Read": {
    setup: seedTree,
    ok: (t) => ({ req: { identifiers: [`${t}-st`, `${t}-missing`, `${t}-ds`] } }),
    bad: { identifiers: ["x"], as_of: "yesterday" },
  },
  "ResourceService.Update": {
    setup: seedTree,
    ok: (t) => ({
      req: { updates: { [`${t}-st`]: { study: { modality: "PT" }, update_mask: "modality,license" } } },
      rest: { updates: { [`${t}-st`]: { modality: "PT", license: null } } },
    }),
    bad: { updates: { "nobody-at-all": { license: "x" } } },
  },
  "ResourceService.Delete": {
    setup: seedTree,
    ok: (t) => ({ req: { identifiers: [`${t}-pat`] } }),
    bad: { identifiers: ["bad id!"] },
  },
  "ResourceService.Restore": {
    setup: async (t) => {
      await seedTree(t);
      await rest("/resources/delete", { identifiers: [`${t}-pat`] });
    },
    ok: (t) => ({ req: { identifiers: [`${t}-pat`] } }),
    bad: { identifiers: ["bad id!"] },
  },
  "ResourceService.History": {
    setup: seedHistory,
    ok: (t) => ({ req: { identifier: `${t}-st`, limit: 1 } }),
    bad: { identifier: "bad id!" },
  },
  "QueryService.Query": {
    setup: seedTree,
    ok: (t) => ({
      req: { payload_type: "file", parent_identifier: `${t}-ds`, include_indirect_parents: true, limit: 5 },
    }),
    bad: { payload_type: "file", filters: [{ field: "nope", op: "eq", value: 1 }] },
  },
  "QueryService.Count": {
    setup: seedTree,
    ok: (t) => ({ req: { parent_identifier: `${t}-ds`, include_indirect_parents: true } }),
    bad: { limit: 0, filters: [{ field: "identifier", op: "zz", value: 1 }] },
  },
  "QueryService.QueryParquet": {
    setup: seedTree,
    ok: (t) => ({ req: { payload_type: "study", parent_identifier: `${t}-pat`, select_columns: ["modality"] } }),
    bad: { limit: 10001 },
  },
  "LineageService.Children": {
    setup: seedTree,
    ok: (t) => ({ req: { parent_identifier: `${t}-ds`, with_payloads: true } }),
    bad: { parent_identifier: "no-such-parent-anywhere" },
  },
  "LineageService.Parents": {
    setup: seedTree,
    ok: (t) => ({ req: { identifier: `${t}-f` } }),
    bad: { identifier: "no-such-resource-anywhere" },
  },
  "RegistryService.RegisterPatient": {
    ok: (t) => ({ req: { datasource_id: `${t}-dsid`, external_uid: "MRN-1" } }),
    bad: { datasource_id: "", external_uid: "x" },
  },
  "RegistryService.ResolvePatient": {
    setup: async (t) => void (await rest("/patients/register", { datasource_id: `${t}-dsid`, external_uid: "MRN-2" })),
    ok: (t) => ({ req: { datasource_id: `${t}-dsid`, external_uid: "MRN-2" } }),
    bad: { datasource_id: "never-registered", external_uid: "x" },
  },
  "RegistryService.RegisterStudy": {
    setup: async (t) => void (await rest("/patients/register", { datasource_id: `${t}-dsid`, external_uid: "MRN-3" })),
    ok: () => ({ req: {} }),
    bad: { patient_identifier: "pat_00000000000000000000000000000000", external_uid: "S" },
  },
  "RegistryService.ResolveStudy": {
    ok: () => ({ req: {} }),
    bad: { patient_identifier: "pat_00000000000000000000000000000000", external_uid: "S" },
  },
  "ArtefactService.Latest": {
    setup: seedTree,
    ok: (t) => ({ req: { repo: `${t}/r`, branch: "main", path: "m.onnx" } }),
    bad: { repo: "nobody/none", branch: "main", path: "m.onnx" },
  },
  "StatsService.Stats": { ok: () => ({ req: {} }), bad: {} },
  "StatsService.DetailedStats": {
    setup: seedTree,
    ok: (t) => ({ req: { datasource_id: `${t}-dsid` } }),
    bad: { datasource_id: "never-seen-datasource" },
  },
  "SchemaService.Schemas": { ok: () => ({ req: {} }), bad: {} },
  "IdentityService.WhoAmI": { ok: () => ({ req: {} }), bad: {} },
  "StorageService.Config": { ok: () => ({ req: {} }), bad: {} },
  "StorageService.Presign": {
    ok: (t) => ({ req: { direction: "upload", filename: "a.dcm", group: `g/${t}` } }),
    bad: { direction: "upload", filename: "../a", group: "g" },
  },
  "StorageService.PresignBatch": {
    ok: (t) => ({ req: { direction: "download", items: [{ path: `s3://resources/g/${t}/x` }] } }),
    bad: { direction: "download", items: [{ path: "s3://other-bucket/x" }] },
  },
  "StorageService.PresignUploadDir": {
    ok: (t) => ({ req: { group: `g/${t}`, relpaths: ["a/b.txt", "c.txt"] } }),
    bad: { group: "g", relpaths: ["a/../b"] },
  },
  "StorageService.List": {
    setup: async (t) => void (await upload(t, "one.txt", new TextEncoder().encode("hello"))),
    ok: (t) => ({ req: { prefix: `s3://resources/g/${t}/` } }),
    bad: { prefix: "s3://other-bucket/" },
  },
  "StorageService.ParquetPreview": {
    setup: async (t) => {
      await seedTree(t);
      const res = await fetch(`${srv.url}/query/parquet`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          parent_identifier: `${t}-ds`,
          include_indirect_parents: true,
          select_columns: ["payload_type"],
          sort_by: "identifier",
          sort_order: "asc",
        }),
      });
      parquetPaths.set(t, await upload(t, "tree.parquet", new Uint8Array(await res.arrayBuffer())));
    },
    ok: (t) => ({ req: { path: parquetPaths.get(t)!, limit: 2, offset: 1 } }),
    bad: { path: "s3://resources/x", limit: 0 },
  },
  "AdminService.RefreshMaterializedViews": { ok: () => ({ req: {} }), bad: {} },
  "AdminService.Dump": { ok: () => ({ req: {} }), bad: { since: "yesterday" } },
};

// Study registration needs a registered patient, whose identifier differs
// per protocol: the test body resolves it for those two methods.
const patientOf = async (t: string, uid: string) =>
  (await rest("/patients/resolve", { datasource_id: `${t}-dsid`, external_uid: uid })).identifier as string;

const methods = revisions.flatMap((r) => r.services.flatMap((s) => s.methods));

describe("every RPC agrees over gRPC, Connect JSON and REST", () => {
  it("has a scenario for every method of both revisions", () => {
    const names = new Set(methods.map((m) => `${m.parent.name}.${m.name}`));
    expect([...names].sort()).toEqual(Object.keys(scenarios).sort());
  });

  let n = 0;
  it.each(methods.map((m) => [`${m.parent.typeName}/${m.name}`, m] as const))("%s", async (_name, method) => {
    const sc = scenarios[`${method.parent.name}.${method.name}`]!;
    const outcomes: Record<string, unknown> = {};
    const errors: Record<string, unknown> = {};
    for (const p of PROTOCOLS) {
      const t = `pa${n++}${p}`;
      await sc.setup?.(t);
      const ok = sc.ok(t);
      let req = ok.req;
      const restReq = ok.rest;
      if (method.name === "RegisterStudy")
        req = { patient_identifier: await patientOf(t, "MRN-3"), external_uid: "S1" };
      if (method.name === "ResolveStudy") {
        await rest("/patients/register", { datasource_id: `${t}-dsid`, external_uid: "MRN-4" });
        const pid = await patientOf(t, "MRN-4");
        await rest("/studies/register", { patient_identifier: pid, external_uid: "S2" });
        req = { patient_identifier: pid, external_uid: "S2" };
      }
      outcomes[p] = normalize(await call(p, method, req, restReq), t);
      errors[p] = normalize(await call(p, method, sc.bad, sc.bad), t);
    }
    expect(outcomes.connect, "connect vs grpc").toEqual(outcomes.grpc);
    expect(outcomes.rest, "rest vs grpc").toEqual(outcomes.grpc);
    if (Object.keys(sc.bad).length > 0) expect(errors.grpc).toHaveProperty("error");
    expect(outcomes.grpc).toHaveProperty("ok");
    expect(errors.connect, "connect error vs grpc").toEqual(errors.grpc);
    expect(errors.rest, "rest error vs grpc").toEqual(errors.grpc);
  });
});
