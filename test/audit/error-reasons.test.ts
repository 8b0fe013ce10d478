// The error catalogue on the wire: for a representative error of each
// condition, the same stable reason arrives over REST (`reason` in the body),
// Connect JSON (a google.rpc.ErrorInfo in `details`) and gRPC (an ErrorInfo
// in grpc-status-details-bin, as grpc-js hands it over), each beside the code.
import * as grpc from "@grpc/grpc-js";
import { fromBinary, fromJson, toBinary, type DescMethod, type JsonValue } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { base64Decode } from "@bufbuild/protobuf/wire";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema, type ErrorInfo } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { LineageService } from "../../gen/resourcestore/v2/lineage_service_pb.js";
import { RegistryService } from "../../gen/resourcestore/v2/registry_service_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { ERROR_DOMAIN, errorCatalogue, type Reason } from "../../src/errors.js";
import { startTestServer, type TestServer } from "../support/app.js";

const READ = "reasons-read-token";
const WRITE = "reasons-write-token";
const MAX_ITEMS = 3;

let srv: TestServer;

interface Case {
  readonly reason: Reason;
  readonly code: string;
  readonly token?: string;
  readonly method: DescMethod;
  /** Proto JSON of the request, for gRPC and Connect. */
  readonly rpc: Record<string, unknown>;
  /** The same call over REST. */
  readonly rest: { verb: "GET" | "POST"; path: string; body?: unknown };
}

const create = ResourceService.method.create;
const read = ResourceService.method.read;
const update = ResourceService.method.update;

const cases: readonly Case[] = [
  {
    reason: "IDENTIFIER_ACTIVE",
    code: "failed_precondition",
    method: create,
    rpc: { resources: [{ identifier: "er-ds", datasource: { name: "again" } }] },
    rest: {
      verb: "POST",
      path: "/resources/create",
      body: { resources: [{ identifier: "er-ds", payload_type: "datasource", name: "again" }] },
    },
  },
  {
    reason: "DANGLING_PARENT",
    code: "failed_precondition",
    method: create,
    rpc: { resources: [{ identifier: "er-p9", parent_identifier: "er-nowhere", patient: { datasource_id: "er-ds" } }] },
    rest: {
      verb: "POST",
      path: "/resources/create",
      body: {
        resources: [
          { identifier: "er-p9", parent_identifier: "er-nowhere", payload_type: "patient", datasource_id: "er-ds" },
        ],
      },
    },
  },
  {
    reason: "CYCLE",
    code: "failed_precondition",
    method: update,
    rpc: { updates: { "er-a": { parent_identifier: "er-b" } } },
    rest: { verb: "POST", path: "/resources/update", body: { updates: { "er-a": { parent_identifier: "er-b" } } } },
  },
  {
    reason: "PAYLOAD_TYPE_CHANGED",
    code: "failed_precondition",
    method: update,
    rpc: { updates: { "er-ds": { patient: { datasource_id: "er-ds" } } } },
    rest: {
      verb: "POST",
      path: "/resources/update",
      body: { updates: { "er-ds": { payload_type: "patient", datasource_id: "er-ds" } } },
    },
  },
  {
    reason: "TOMBSTONED",
    code: "failed_precondition",
    method: update,
    rpc: { updates: { "er-gone": { license: "CC0" } } },
    rest: { verb: "POST", path: "/resources/update", body: { updates: { "er-gone": { license: "CC0" } } } },
  },
  {
    reason: "UNKNOWN_IDENTIFIER",
    code: "failed_precondition",
    method: update,
    rpc: { updates: { "er-never": { license: "CC0" } } },
    rest: { verb: "POST", path: "/resources/update", body: { updates: { "er-never": { license: "CC0" } } } },
  },
  {
    reason: "ALREADY_REGISTERED",
    code: "failed_precondition",
    method: RegistryService.method.registerPatient,
    rpc: { datasource_id: "er-ds", external_uid: "uid-1" },
    rest: { verb: "POST", path: "/patients/register", body: { datasource_id: "er-ds", external_uid: "uid-1" } },
  },
  {
    reason: "NOT_REGISTERED",
    code: "failed_precondition",
    token: READ,
    method: RegistryService.method.resolvePatient,
    rpc: { datasource_id: "er-ds", external_uid: "uid-unknown" },
    rest: { verb: "POST", path: "/patients/resolve", body: { datasource_id: "er-ds", external_uid: "uid-unknown" } },
  },
  {
    reason: "BATCH_TOO_LARGE",
    code: "invalid_argument",
    token: READ,
    method: read,
    rpc: { identifiers: ["a", "b", "c", "d"] },
    rest: { verb: "POST", path: "/resources/read", body: { identifiers: ["a", "b", "c", "d"] } },
  },
  {
    reason: "INVALID_AS_OF",
    code: "invalid_argument",
    token: READ,
    method: read,
    rpc: { identifiers: ["er-ds"], as_of: "yesterday" },
    rest: { verb: "POST", path: "/resources/read", body: { identifiers: ["er-ds"], as_of: "yesterday" } },
  },
  {
    reason: "UNKNOWN_FIELD",
    code: "invalid_argument",
    method: update,
    rpc: { updates: { "er-ds": { payload_fields: { colour: "red" } } } },
    rest: { verb: "POST", path: "/resources/update", body: { updates: { "er-ds": { colour: "red" } } } },
  },
  {
    reason: "NOT_FOUND",
    code: "not_found",
    token: READ,
    method: LineageService.method.parents,
    rpc: { identifier: "er-never" },
    rest: { verb: "GET", path: "/parents/er-never" },
  },
  {
    reason: "UNAUTHENTICATED",
    code: "unauthenticated",
    token: "",
    method: read,
    rpc: { identifiers: ["er-ds"] },
    rest: { verb: "POST", path: "/resources/read", body: { identifiers: ["er-ds"] } },
  },
  {
    reason: "PERMISSION_DENIED",
    code: "permission_denied",
    token: READ,
    method: create,
    rpc: { resources: [{ identifier: "er-new", datasource: { name: "n" } }] },
    rest: {
      verb: "POST",
      path: "/resources/create",
      body: { resources: [{ identifier: "er-new", payload_type: "datasource", name: "n" }] },
    },
  },
];

function authHeader(token: string | undefined): Record<string, string> {
  const t = token ?? WRITE;
  return t === "" ? {} : { authorization: `Bearer ${t}` };
}

async function restCall(c: Case): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(srv.url + c.rest.path, {
    method: c.rest.verb,
    headers: { ...authHeader(c.token), ...(c.rest.body === undefined ? {} : { "content-type": "application/json" }) },
    ...(c.rest.body === undefined ? {} : { body: JSON.stringify(c.rest.body) }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function connectCall(c: Case): Promise<{ code: string; info: ErrorInfo[] }> {
  const path = `/${c.method.parent.typeName}/${c.method.name}`;
  const res = await fetch(srv.url + path, {
    method: "POST",
    headers: { "content-type": "application/json", ...authHeader(c.token) },
    body: JSON.stringify(c.rpc),
  });
  const body = (await res.json()) as { code: string; details?: { type: string; value: string }[] };
  const info = (body.details ?? [])
    .filter((d) => d.type === ErrorInfoSchema.typeName)
    .map((d) => fromBinary(ErrorInfoSchema, base64Decode(d.value)));
  return { code: body.code, info };
}

async function grpcCall(c: Case): Promise<{ code: number; info: ErrorInfo[] }> {
  const client = new grpc.Client(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure());
  const msg = fromJson(c.method.input, c.rpc as JsonValue);
  const metadata = new grpc.Metadata();
  for (const [k, v] of Object.entries(authHeader(c.token))) metadata.set(k, v);
  try {
    const err = await new Promise<grpc.ServiceError>((resolve, reject) =>
      client.makeUnaryRequest(
        `/${c.method.parent.typeName}/${c.method.name}`,
        (m: typeof msg) => Buffer.from(toBinary(c.method.input, m)),
        (b: Buffer) => b,
        msg,
        metadata,
        (e) => (e ? resolve(e) : reject(new Error("the call succeeded"))),
      ),
    );
    const raw = err.metadata.get("grpc-status-details-bin")[0];
    if (!(raw instanceof Buffer)) return { code: err.code, info: [] };
    const status = fromBinary(StatusSchema, raw);
    expect(status.code).toBe(err.code);
    const info = status.details
      .map((d) => anyUnpack(d, ErrorInfoSchema))
      .filter((d): d is ErrorInfo => d !== undefined);
    return { code: err.code, info };
  } finally {
    client.close();
  }
}

const GRPC_CODES: Record<string, number> = {
  failed_precondition: grpc.status.FAILED_PRECONDITION,
  invalid_argument: grpc.status.INVALID_ARGUMENT,
  not_found: grpc.status.NOT_FOUND,
  unauthenticated: grpc.status.UNAUTHENTICATED,
  permission_denied: grpc.status.PERMISSION_DENIED,
};

beforeAll(async () => {
  srv = await startTestServer({
    API_TOKENS: `${READ}=read;${WRITE}=write`,
    MAX_BATCH_ITEMS: String(MAX_ITEMS),
    MAX_BODY_BYTES: "1024",
  });
  const post = async (path: string, body: unknown): Promise<void> => {
    const res = await fetch(srv.url + path, {
      method: "POST",
      headers: { "content-type": "application/json", ...authHeader(WRITE) },
      body: JSON.stringify(body),
    });
    expect(res.status, `${path}: ${await res.clone().text()}`).toBe(200);
  };
  // Batches stay within MAX_ITEMS.
  await post("/resources/create", {
    resources: [
      { identifier: "er-ds", payload_type: "datasource", name: "Reasons" },
      { identifier: "er-a", payload_type: "patient", datasource_id: "er-ds", parent_identifier: "er-ds" },
      { identifier: "er-b", payload_type: "patient", datasource_id: "er-ds", parent_identifier: "er-a" },
    ],
  });
  await post("/resources/create", {
    resources: [{ identifier: "er-gone", payload_type: "patient", datasource_id: "er-ds" }],
  });
  await post("/resources/delete", { identifiers: ["er-gone"] });
  await post("/patients/register", { datasource_id: "er-ds", external_uid: "uid-1" });
});

afterAll(async () => {
  await srv?.close();
});

describe("every error carries its catalogue reason", () => {
  it("the cases cover the conditions of the contract's failed_precondition list", () => {
    const covered = new Set(cases.map((c) => c.reason));
    for (const r of [
      "IDENTIFIER_ACTIVE",
      "UNKNOWN_IDENTIFIER",
      "DANGLING_PARENT",
      "CYCLE",
      "PAYLOAD_TYPE_CHANGED",
      "TOMBSTONED",
      "ALREADY_REGISTERED",
      "NOT_REGISTERED",
    ] as const) {
      expect(covered.has(r), r).toBe(true);
    }
    for (const c of cases) expect(errorCatalogue[c.reason].code, c.reason).toBe(GRPC_CODES[c.code]);
  });

  for (const c of cases) {
    it(`${c.reason} over REST, Connect and gRPC`, async () => {
      const rest = await restCall(c);
      expect(rest.body).toMatchObject({ code: c.code, reason: c.reason });
      expect(typeof rest.body["message"]).toBe("string");

      const connect = await connectCall(c);
      expect(connect.code).toBe(c.code);
      expect(connect.info.map((i) => [i.domain, i.reason])).toEqual([[ERROR_DOMAIN, c.reason]]);

      const g = await grpcCall(c);
      expect(g.code).toBe(GRPC_CODES[c.code]);
      expect(g.info.map((i) => [i.domain, i.reason])).toEqual([[ERROR_DOMAIN, c.reason]]);
    });
  }

  it("BODY_TOO_LARGE over REST, with the status of the contract", async () => {
    const res = await fetch(srv.url + "/resources/read", {
      method: "POST",
      headers: { "content-type": "application/json", ...authHeader(READ) },
      body: JSON.stringify({ identifiers: ["x".repeat(2000)] }),
    });
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({ code: "resource_exhausted", reason: "BODY_TOO_LARGE" });
  });

  it("METHOD_NOT_ALLOWED keeps 405 and the Allow header", async () => {
    const res = await fetch(srv.url + "/resources/read", { method: "GET", headers: authHeader(READ) });
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("POST");
    expect(await res.json()).toMatchObject({ code: "unimplemented", reason: "METHOD_NOT_ALLOWED" });
  });

  it("NO_OPERATION for an unknown path under a revision", async () => {
    const res = await fetch(srv.url + "/v2/nowhere", { headers: authHeader(READ) });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ code: "not_found", reason: "NO_OPERATION" });
  });
});
