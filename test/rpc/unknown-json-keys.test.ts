// Connect JSON refuses a key its message does not have, as REST does
// (docs/contract/01-resources.md: an unknown field for a payload type is 400
// and nothing of the batch is written; unknown keys at the top level of any
// request body are 400). connect ignores unknown keys by default: a misspelt key was
// silently dropped, so a create kept a payload without the field the caller
// sent, and a read or query answered another question than the one asked.
// The refusal is invalid_argument UNKNOWN_FIELD with protobuf-es's message
// naming the key, a request id and a call line, on the unary lane and behind
// the body guard (a call with a deadline) alike. Keys of the response shape
// (created_at, version, ...) are fields of the message and stay accepted
// (docs/contract/13-client.md, settled since), as do protobuf JSON's lowerCamelCase names.
import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";
import { envelope, webTrailers } from "../support/envelopes.js";
import { h2Request, type H2Answer } from "../support/h2.js";
import { logLines } from "../support/log-lines.js";

const log = logLines("info");
let srv: TestServer;

beforeAll(async () => {
  srv = await startTestServer({}, {}, log.logger);
}, 60_000);
afterAll(async () => {
  await srv?.close();
});

const CREATE = "/resourcestore.v2.ResourceService/Create";
const READ = "/resourcestore.v2.ResourceService/Read";
const QUERY = "/resourcestore.v2.QueryService/Query";

async function call(
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: Record<string, unknown>; requestId: string | null }> {
  const res = await fetch(`${srv.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  return {
    status: res.status,
    json: (await res.json()) as Record<string, unknown>,
    requestId: res.headers.get("x-request-id"),
  };
}

const reasonOf = (json: Record<string, unknown>): unknown =>
  (json.details as { debug?: { reason?: string } }[] | undefined)?.[0]?.debug?.reason;

/** The lane (no deadline) and the body guard in front of connect (a deadline). */
const paths: [string, Record<string, string>][] = [
  ["the unary lane", {}],
  ["behind the body guard", { "connect-timeout-ms": "30000" }],
];

describe.each(paths)("Connect JSON, %s", (name, headers) => {
  const tag = name.replace(/\W+/g, "-");

  it("an unknown key of a payload is 400 UNKNOWN_FIELD, and nothing of the batch is written", async () => {
    const ids = [`uk-${tag}-ok`, `uk-${tag}-bad`];
    const requestId = `uk-create-${tag}`;
    const created = await call(
      CREATE,
      {
        resources: [
          { identifier: ids[0], study: { modality: "CT" } },
          { identifier: ids[1], study: { modality: "CT", modalty: "MR" } },
        ],
      },
      { ...headers, "x-request-id": requestId },
    );
    expect(created.status).toBe(400);
    expect(created.json).toMatchObject({
      code: "invalid_argument",
      message: 'cannot decode message resourcestore.type.v1.Study from JSON: key "modalty" is unknown',
    });
    expect(reasonOf(created.json)).toBe("UNKNOWN_FIELD");
    expect(created.requestId).toBe(requestId);
    const calls = log.calls((r) => r.request_id === requestId);
    expect(calls).toEqual([
      expect.objectContaining({ rpc: "resourcestore.v2.ResourceService/Create", code: "InvalidArgument" }),
    ]);
    const read = await call(READ, { identifiers: ids }, headers);
    expect(read.status).toBe(200);
    expect(read.json.resources ?? []).toEqual([]);
  });

  it("an unknown key at the top level is 400 UNKNOWN_FIELD (a misspelt as_of is not read as now)", async () => {
    const read = await call(READ, { identifiers: ["uk-none"], as_off: "2020-01-01T00:00:00Z" }, headers);
    expect(read.status).toBe(400);
    expect(read.json.message).toBe(
      'cannot decode message resourcestore.type.v1.ReadRequest from JSON: key "as_off" is unknown',
    );
    expect(reasonOf(read.json)).toBe("UNKNOWN_FIELD");
    const query = await call(QUERY, { payload_type: "study", filter: [] }, headers);
    expect(query.status).toBe(400);
    expect(reasonOf(query.json)).toBe("UNKNOWN_FIELD");
  });

  it("keys of the response shape and lowerCamelCase names are accepted", async () => {
    const id = `uk-${tag}-shape`;
    const created = await call(
      CREATE,
      { resources: [{ identifier: id, study: { modality: "CT" }, created_at: "2020-01-01T00:00:00Z", version: "7" }] },
      headers,
    );
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const read = await call(READ, { identifiers: [id], asOf: new Date().toISOString() }, headers);
    expect(read.status, JSON.stringify(read.json)).toBe(200);
    expect(read.json.resources).toEqual([
      expect.objectContaining({ identifier: id, version: "1", study: { modality: "CT" } }),
    ]);
  });

  it("a value of the wrong type is still MALFORMED_BODY", async () => {
    const read = await call(READ, { identifiers: 5 }, headers);
    expect(read.status).toBe(400);
    expect(reasonOf(read.json)).toBe("MALFORMED_BODY");
  });
});

// A JSON message in an envelope (Connect streaming, gRPC and gRPC-Web with
// +json) is checked by the body guard too: before, connect decoded it before
// any interceptor, so a refusal had no reason, no request id and no call line.
describe("an enveloped JSON message", () => {
  let session: http2.ClientHttp2Session;
  beforeAll(() => {
    session = http2.connect(srv.url);
  });
  afterAll(() => {
    session?.close();
  });
  const json = (text: string) => envelope(Buffer.from(text));
  const WATCH = "/resourcestore.v2.EventService/Watch";
  const QUERY_PARQUET = "/resourcestore.v2.QueryService/QueryParquet";

  /** The refusal of an answer, whichever wire: code or status, message, reason and request id. */
  function refusal(a: H2Answer): { status: string; message: string; reason: unknown; requestId: unknown } {
    if (a.headers["content-type"]?.startsWith("application/connect")) {
      const end = JSON.parse(a.body.subarray(5).toString()) as {
        error: { code: string; message: string; details: { debug?: { reason?: string } }[] };
        metadata: Record<string, string[]>;
      };
      return {
        status: end.error.code,
        message: end.error.message,
        reason: end.error.details[0]?.debug?.reason,
        requestId: end.metadata["x-request-id"]?.[0],
      };
    }
    // gRPC trailers, or gRPC-Web's trailer frame
    const fields: Record<string, string> = { ...a.headers, ...a.trailers, ...webTrailers(a.body) };
    const details =
      fields["grpc-status-details-bin"] === undefined
        ? undefined
        : Buffer.from(fields["grpc-status-details-bin"], "base64").toString("latin1");
    return {
      status: fields["grpc-status"] ?? "",
      message: decodeURIComponent(fields["grpc-message"] ?? ""),
      reason: /UNKNOWN_FIELD|MALFORMED_BODY/.exec(details ?? "")?.[0],
      requestId: fields["x-request-id"],
    };
  }

  const cases: [string, string, Record<string, string>, string, { status: string; message: string; reason: string }][] =
    [
      [
        "Watch over Connect streaming, a misspelt key",
        WATCH,
        { "content-type": "application/connect+json" },
        '{"sinse": "2020-01-01T00:00:00Z"}',
        {
          status: "invalid_argument",
          message: 'cannot decode message resourcestore.type.v1.WatchRequest from JSON: key "sinse" is unknown',
          reason: "UNKNOWN_FIELD",
        },
      ],
      [
        "QueryParquet over Connect streaming, JSON that does not parse",
        QUERY_PARQUET,
        { "content-type": "application/connect+json" },
        "{bad",
        {
          status: "invalid_argument",
          message: expect.stringMatching(/^cannot decode message resourcestore\.type\.v1\.QueryRequest from JSON: /),
          reason: "MALFORMED_BODY",
        },
      ],
      [
        "QueryParquet over gRPC-Web, a misspelt key",
        QUERY_PARQUET,
        { "content-type": "application/grpc-web+json" },
        '{"payload_type": "study", "filter": []}',
        {
          status: "3",
          message: 'cannot decode message resourcestore.type.v1.QueryRequest from JSON: key "filter" is unknown',
          reason: "UNKNOWN_FIELD",
        },
      ],
      [
        "Read over gRPC, a misspelt key",
        READ,
        { "content-type": "application/grpc+json", te: "trailers" },
        '{"identifiers": [], "as_off": "2020-01-01T00:00:00Z"}',
        {
          status: "3",
          message: 'cannot decode message resourcestore.type.v1.ReadRequest from JSON: key "as_off" is unknown',
          reason: "UNKNOWN_FIELD",
        },
      ],
    ];

  for (const [name, path, headers, body, expected] of cases) {
    it(`${name}: refused with its reason, request id and call line`, async () => {
      const requestId = `uk-env-${name.replace(/\W+/g, "-")}`;
      const a = await h2Request(session, path, { ...headers, "x-request-id": requestId }, json(body));
      expect(refusal(a)).toEqual({ ...expected, requestId });
      const calls = log.calls((r) => r.request_id === requestId);
      expect(calls).toEqual([expect.objectContaining({ code: "InvalidArgument" })]);
    });
  }

  it("valid ones are answered: Read over gRPC, QueryParquet over Connect streaming", async () => {
    const id = "uk-env-read";
    expect((await call(CREATE, { resources: [{ identifier: id, study: { modality: "CT" } }] })).status).toBe(200);
    const read = await h2Request(
      session,
      READ,
      { "content-type": "application/grpc+json", te: "trailers" },
      json(JSON.stringify({ identifiers: [id] })),
    );
    expect(read.trailers["grpc-status"]).toBe("0");
    expect(JSON.parse(read.body.subarray(5).toString())).toMatchObject({
      resources: [{ identifier: id, study: { modality: "CT" } }],
    });
    const parquet = await h2Request(
      session,
      QUERY_PARQUET,
      { "content-type": "application/connect+json" },
      json('{"payload_type": "study"}'),
    );
    expect(parquet.status).toBe(200);
    const first = JSON.parse(parquet.body.subarray(5, 5 + parquet.body.readUInt32BE(1)).toString()) as { data: string };
    expect(Buffer.from(first.data, "base64").subarray(0, 4).toString()).toBe("PAR1");
  });
});
