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
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../src/log.js";
import { startTestServer, type TestServer } from "../support/app.js";

const lines: string[] = [];
let srv: TestServer;

beforeAll(async () => {
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(...chunk.toString().split("\n").filter((l) => l !== ""));
      cb();
    },
  });
  srv = await startTestServer({}, {}, createLogger("info", sink));
}, 60_000);
afterAll(async () => {
  await srv?.close();
});

const CREATE = "/resourcestore.v2.ResourceService/Create";
const READ = "/resourcestore.v2.ResourceService/Read";
const QUERY = "/resourcestore.v2.QueryService/Query";

async function call(path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: Record<string, unknown>; requestId: string | null }> {
  const res = await fetch(`${srv.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as Record<string, unknown>, requestId: res.headers.get("x-request-id") };
}

const reasonOf = (json: Record<string, unknown>): unknown => (json.details as { debug?: { reason?: string } }[] | undefined)?.[0]?.debug?.reason;

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
      { resources: [{ identifier: ids[0], study: { modality: "CT" } }, { identifier: ids[1], study: { modality: "CT", modalty: "MR" } }] },
      { ...headers, "x-request-id": requestId },
    );
    expect(created.status).toBe(400);
    expect(created.json).toMatchObject({ code: "invalid_argument", message: 'cannot decode message resourcestore.type.v1.Study from JSON: key "modalty" is unknown' });
    expect(reasonOf(created.json)).toBe("UNKNOWN_FIELD");
    expect(created.requestId).toBe(requestId);
    const calls = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((r) => r.msg === "call" && r.request_id === requestId);
    expect(calls).toEqual([expect.objectContaining({ rpc: "resourcestore.v2.ResourceService/Create", code: "InvalidArgument" })]);
    const read = await call(READ, { identifiers: ids }, headers);
    expect(read.status).toBe(200);
    expect(read.json.resources ?? []).toEqual([]);
  });

  it("an unknown key at the top level is 400 UNKNOWN_FIELD (a misspelt as_of is not read as now)", async () => {
    const read = await call(READ, { identifiers: ["uk-none"], as_off: "2020-01-01T00:00:00Z" }, headers);
    expect(read.status).toBe(400);
    expect(read.json.message).toBe('cannot decode message resourcestore.type.v1.ReadRequest from JSON: key "as_off" is unknown');
    expect(reasonOf(read.json)).toBe("UNKNOWN_FIELD");
    const query = await call(QUERY, { payload_type: "study", filter: [] }, headers);
    expect(query.status).toBe(400);
    expect(reasonOf(query.json)).toBe("UNKNOWN_FIELD");
  });

  it("keys of the response shape and lowerCamelCase names are accepted", async () => {
    const id = `uk-${tag}-shape`;
    const created = await call(CREATE, { resources: [{ identifier: id, study: { modality: "CT" }, created_at: "2020-01-01T00:00:00Z", version: "7" }] }, headers);
    expect(created.status, JSON.stringify(created.json)).toBe(200);
    const read = await call(READ, { identifiers: [id], asOf: new Date().toISOString() }, headers);
    expect(read.status, JSON.stringify(read.json)).toBe(200);
    expect(read.json.resources).toEqual([expect.objectContaining({ identifier: id, version: "1", study: { modality: "CT" } })]);
  });

  it("a value of the wrong type is still MALFORMED_BODY", async () => {
    const read = await call(READ, { identifiers: 5 }, headers);
    expect(read.status).toBe(400);
    expect(reasonOf(read.json)).toBe("MALFORMED_BODY");
  });
});
