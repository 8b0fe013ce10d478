// Thousands of malformed and hostile requests against every REST route and
// every RPC (Connect JSON, Connect binary and gRPC-web garbage): never a 500,
// never a hung request (each has a timeout), never a partial write (the
// store's fingerprint is unchanged by every failed mutation), and no message
// that leaks SQL, stack frames or file paths. Tokens are on: the fuzzed
// requests carry a valid token, none or a wrong one, so the front door's
// pre-auth refusals (401 before any body is read) are fuzzed too. The limits
// of docs/contract/16-limits.md get their own properties: nested `any` groups around
// MAX_FILTER_DEPTH, non-JSON REST content types (415), dot-segment and
// backslash paths (404) and parent chains around MAX_TREE_DEPTH.
import http from "node:http";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { declaredScope } from "../../src/auth/index.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { TEST_REGISTRY_SECRET } from "../support/registry-key.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { fullSamples } from "../support/samples.js";
import { readAnswer } from "./calls.js";
import { storeFingerprint } from "./fingerprint.js";
import { hostileObject, hostileQuery, hostileSegment, hostileValue, rawGarbage } from "./hostile.js";
import { fillTemplate, operations, type Operation } from "./operations.js";

const TOKEN = "fuzz-admin-token";
const TIMEOUT_MS = 5000;
const MAX_TREE_DEPTH = 6;
const MAX_FILTER_DEPTH = 8;
/** Which credentials a fuzzed request carries; most carry the valid one, so the routes behind the door are fuzzed too. */
type Cred = "valid" | "none" | "wrong";
const credArb = fc.constantFrom<Cred>("valid", "valid", "none", "wrong");
const credHeader = (cred: Cred): Record<string, string> =>
  cred === "valid" ? {} : cred === "none" ? { authorization: "" } : { authorization: "Bearer not-the-fuzz-token" };
let srv: TestServer;
let pgdb: TestDatabase | undefined;

beforeAll(async () => {
  const env: Record<string, string> = {
    API_TOKENS: `${TOKEN}=admin`,
    MAX_BATCH_ITEMS: "50",
    MAX_TREE_DEPTH: String(MAX_TREE_DEPTH),
    MAX_FILTER_DEPTH: String(MAX_FILTER_DEPTH),
  };
  if (await postgresReachable()) {
    pgdb = await createTestDatabase();
    env.DATABASE_URL = pgdb.url;
    env.REGISTRY_SECRET = TEST_REGISTRY_SECRET;
  }
  srv = await startTestServer(env);
  const seed = await send(
    "POST",
    "/resources/create",
    JSON.stringify({
      resources: [
        { identifier: "root", payload_type: "datasource", name: "ds" },
        { identifier: "child", parent_identifier: "root", payload_type: "patient", datasource_id: "root" },
        { identifier: "gone", payload_type: "annotation", label: "l" },
        // A chain as deep as MAX_TREE_DEPTH allows: chain-i has i ancestors.
        ...Array.from({ length: MAX_TREE_DEPTH + 1 }, (_, i) => ({
          identifier: `chain-${i}`,
          payload_type: "annotation",
          label: "l",
          ...(i > 0 ? { parent_identifier: `chain-${i - 1}` } : {}),
        })),
      ],
    }),
  );
  expect(seed.status).toBe(200);
  expect((await send("POST", "/resources/delete", JSON.stringify({ identifiers: ["gone"] }))).status).toBe(200);
}, 60_000);
afterAll(async () => {
  await srv?.close();
  await pgdb?.drop();
});

// What an answer must never contain (unless the request itself did: a
// message may quote the field name a client sent).
const LEAKS: RegExp[] = [
  /\bSELECT\b/i,
  /\bINSERT\s+INTO\b/i,
  /\bUPDATE\s+\w+\s+SET\b/i,
  /\bDELETE\s+FROM\b/i,
  /\n\s+at\s/,
  /\bat\s+\S+\s+\(/,
  /\(?\S+\.[cm]?[jt]s:\d+:\d+/,
  /\/work\//,
  /node_modules/,
  /\.ts:\d/,
  /syntax error/i,
  /relation "/i,
  /duplicate key/i,
  /violates .* constraint/i,
  /\bpg_\w+/,
];

interface Answer {
  status: number;
  text: string;
  headers: Headers;
}

async function send(
  method: string,
  path: string,
  body?: string | Uint8Array,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const all: Record<string, string> = {
    authorization: `Bearer ${TOKEN}`,
    ...(body !== undefined ? { "content-type": "application/json" } : {}),
    ...headers,
  };
  if (all.authorization === "") delete all.authorization;
  const res = await fetch(srv.url + path, {
    method,
    headers: all,
    ...(body !== undefined && method !== "GET" && method !== "HEAD" ? { body } : {}),
    signal: AbortSignal.timeout(TIMEOUT_MS),
  });
  const text = Buffer.from(await readAnswer(res, path.includes("EventService/Watch"))).toString("latin1");
  return { status: res.status, text, headers: res.headers };
}

function checkAnswer(a: Answer, requestText: string, where: string): void {
  // 501: an operation not implemented yet; 503: an outage. Neither is a crash.
  if (a.status >= 500 && a.status !== 501 && a.status !== 503)
    throw new Error(`${where}: HTTP ${a.status} ${a.text.slice(0, 300)}`);
  // gRPC-web and gRPC carry the code in grpc-status (a header or the trailer frame).
  const grpc = a.headers.get("grpc-status") ?? /grpc-status:\s*(\d+)/.exec(a.text)?.[1];
  if (grpc === "13" || grpc === "2") throw new Error(`${where}: grpc-status ${grpc} ${a.text.slice(0, 300)}`);
  if (/"code"\s*:\s*"(internal|unknown)"/.test(a.text))
    throw new Error(`${where}: internal error ${a.text.slice(0, 300)}`);
  for (const leak of LEAKS) {
    if (leak.test(a.text) && !leak.test(requestText))
      throw new Error(`${where}: leaks ${leak}: ${a.text.slice(0, 300)}`);
  }
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s.replace(/\+/g, " "));
  } catch {
    return s.replace(/%20|\+/g, " ");
  }
}

const mutating = (op: Operation) => declaredScope(op.method) !== "read";

/** A request sent as is (fetch would resolve dot segments and turn backslashes into slashes). */
function sendRaw(method: string, path: string, body?: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: "127.0.0.1",
        port: srv.port,
        method,
        path,
        headers: { authorization: `Bearer ${TOKEN}`, ...headers },
        timeout: TIMEOUT_MS,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const h = new Headers();
          for (const [k, v] of Object.entries(res.headers)) if (typeof v === "string") h.set(k, v);
          resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("latin1"), headers: h });
        });
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`${method} ${path}: no answer in ${TIMEOUT_MS} ms`)));
    req.on("error", reject);
    req.end(body);
  });
}

/**
 * The text of every write the service accepted: hostile values that are
 * valid data (an SQL fragment in a label) are stored, and a later read
 * answers them as data; a pattern found there is not a leak.
 */
let stored = "";

/** Sends, checks the answer, and for a mutation that failed, that nothing changed; without valid credentials, that it was refused. */
async function probe(
  op: Operation | undefined,
  method: string,
  path: string,
  body?: string | Uint8Array,
  headers?: Record<string, string>,
  cred: Cred = "valid",
): Promise<Answer> {
  const watch = op === undefined || mutating(op);
  const before = watch ? await storeFingerprint(srv.app.db) : "";
  const a = await send(method, path, body, { ...headers, ...credHeader(cred) });
  const requestText = `${path} ${safeDecode(path)} ${body === undefined ? "" : typeof body === "string" ? body : Buffer.from(body).toString("latin1")}`;
  checkAnswer(a, `${requestText} ${stored}`, `${method} ${path.slice(0, 120)}`);
  const ok =
    a.status === 200 &&
    !/grpc-status:\s*[1-9]/.test(a.text) &&
    (a.headers.get("grpc-status") ?? "0") === "0" &&
    !/^[\s\S]{0,5}\{"error":\{"code"/.test(a.text);
  if (watch && ok) stored += ` ${requestText}`;
  if (cred !== "valid" && ok)
    throw new Error(`${method} ${path} with ${cred} credentials was served: ${a.status} ${a.text.slice(0, 200)}`);
  if (watch && !ok) {
    const after = await storeFingerprint(srv.app.db);
    if (after !== before)
      throw new Error(`${method} ${path}: failed with ${a.status} but changed the store: ${a.text.slice(0, 200)}`);
  }
  return a;
}

const fieldNames = (op: Operation) => op.method.input.fields.map((f) => f.name);
const opArb = fc.constantFrom(...operations);
/** Each REST route under its revision prefix and, for the last revision that has it, unprefixed. */
const restPath = (op: Operation, unprefixed: boolean) =>
  unprefixed ? op.rest.path.replace(/^\/v[12]/, "") : op.rest.path;

let serial = 0;
/** A create batch of valid items with one hostile item among them: any write of it would be partial. */
const mixedCreate = fc
  .tuple(
    fc.constantFrom(...Object.keys(fullSamples)),
    fc.nat(3),
    fc.oneof(
      hostileObject([
        "identifier",
        "payload_type",
        "parent_identifier",
        "license",
        "access_level",
        "derived_from",
        "label",
        "path",
        "name",
      ]),
      hostileValue,
    ),
  )
  .map(([type, at, bad]) => {
    const n = ++serial;
    const valid = [0, 1, 2].map((i) => ({ identifier: `mix-${n}-${i}`, payload_type: type, ...fullSamples[type] }));
    const hostile =
      typeof bad === "object" && bad !== null && !Array.isArray(bad)
        ? { ...valid[0], identifier: `mix-${n}-h`, ...bad }
        : bad;
    valid.splice(at % 3, 0, hostile as never);
    return JSON.stringify({ resources: valid });
  });

describe("fuzz: no 500, no hang, no partial write, no leak", () => {
  it("REST bodies on every route", async () => {
    await fc.assert(
      fc.asyncProperty(
        opArb,
        fc.boolean(),
        fc.oneof(
          rawGarbage,
          hostileValue.map((v) => JSON.stringify(v) ?? "null"),
        ),
        credArb,
        async (op, bare, body, cred) => {
          const { verb } = op.rest;
          await probe(op, verb === "GET" ? "POST" : verb, restPath(op, bare), body, {}, cred);
          const obj = fc.sample(hostileObject(fieldNames(op)), 1)[0];
          await probe(op, verb, restPath(op, bare), verb === "GET" ? undefined : JSON.stringify(obj), {}, cred);
        },
      ),
      { numRuns: 400 },
    );
  }, 120_000);

  it("create batches with one hostile item are all-or-nothing", async () => {
    const create = operations.find((o) => o.method.name === "Create" && o.revision === "v2")!;
    await fc.assert(
      fc.asyncProperty(mixedCreate, async (body) => {
        await probe(create, "POST", "/resources/create", body);
      }),
      { numRuns: 200 },
    );
  }, 120_000);

  it("query strings and paths", async () => {
    await fc.assert(
      fc.asyncProperty(
        opArb,
        hostileQuery(["identifier"]),
        fc.array(hostileSegment, { minLength: 1, maxLength: 3 }),
        fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH"),
        async (op, q, segs, verb) => {
          const template = op.rest.path;
          await probe(op, op.rest.verb, `${template}?${q}`, op.rest.hasBody ? "{}" : undefined);
          await probe(
            op,
            op.rest.verb,
            `${fillTemplate(template.replace(/\/x$/, "/{id}"), segs.join("/"))}?${q}`,
            op.rest.hasBody ? "{}" : undefined,
          );
          await probe(undefined, verb, `/${segs.join("/")}?${q}`);
          await probe(undefined, verb, `/v${segs.length}/${segs.join("/")}`);
        },
      ),
      { numRuns: 250 },
    );
  }, 120_000);

  it("Connect JSON, Connect binary and gRPC-web garbage on every RPC", async () => {
    await fc.assert(
      fc.asyncProperty(opArb, rawGarbage, fc.uint8Array({ maxLength: 300 }), credArb, async (op, text, bytes, cred) => {
        const path = `/${op.service.typeName}/${op.method.name}`;
        const streaming = op.method.methodKind === "server_streaming";
        const json = streaming ? "application/connect+json" : "application/json";
        const proto = streaming ? "application/connect+proto" : "application/proto";
        await probe(op, "POST", path, text, { "content-type": json }, cred);
        const obj = fc.sample(
          hostileObject(op.method.input.fields.map((f) => f.jsonName).concat(fieldNames(op))),
          1,
        )[0];
        await probe(op, "POST", path, JSON.stringify(obj), { "content-type": json }, cred);
        await probe(op, "POST", path, bytes, { "content-type": proto }, cred);
        const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, bytes.length]), bytes]);
        await probe(op, "POST", path, frame, { "content-type": "application/grpc-web+proto" }, cred);
      }),
      { numRuns: 250 },
    );
  }, 120_000);

  it("hostile credentials are 401, never 500", async () => {
    await fc.assert(
      fc.asyncProperty(
        opArb,
        fc.string({ maxLength: 300 }).filter((s) => !/[\r\n\0]/.test(s)),
        async (op, junk) => {
          let a: Answer;
          try {
            a = await send(op.rest.verb, op.rest.path, op.rest.hasBody ? "{}" : undefined, {
              authorization: `Bearer ${junk}`,
            });
          } catch (err) {
            // fetch itself refuses some header values: nothing was sent.
            if (err instanceof TypeError && !/timeout|abort/i.test(String(err))) return;
            throw err;
          }
          checkAnswer(a, junk, op.label);
          expect(a.status).toBe(401);
        },
      ),
      { numRuns: 200 },
    );
  }, 120_000);
  // Built as text: JSON.stringify itself recurses.
  const nested = (depth: number, leaf: unknown): string =>
    `${'{"any":['.repeat(depth)}${JSON.stringify(leaf) ?? "null"}${"]}".repeat(depth)}`;
  it("nested any groups up to MAX_FILTER_DEPTH and beyond", async () => {
    const query = operations.find((o) => o.method.name === "Query" && o.revision === "v2")!;
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.integer({ min: 1, max: MAX_FILTER_DEPTH + 3 }), fc.constantFrom(50, 3_000)),
        fc.oneof(hostileValue, fc.constant({ field: "identifier", op: "eq", value: "root" })),
        fc.boolean(),
        credArb,
        async (depth, leaf, rest, cred) => {
          const path = rest ? "/query" : `/${query.service.typeName}/${query.method.name}`;
          const a = await probe(query, "POST", path, `{"filters":[${nested(depth, leaf)}]}`, {}, cred);
          if (cred === "valid" && depth > MAX_FILTER_DEPTH)
            expect([a.status, a.text]).toEqual([400, expect.stringContaining("invalid_argument")]);
        },
      ),
      { numRuns: 60 },
    );
  }, 120_000);

  it("non-JSON content types on REST bodies are 415 (401 without credentials)", async () => {
    const withBody = operations.filter((o) => o.rest.hasBody);
    const type = fc.oneof(
      fc.constantFrom(
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "application/proto",
        "application/jsonx",
        "application/octet-stream",
      ),
      fc.stringMatching(/^[a-z]{1,8}\/[a-z+.-]{1,12}$/).filter((t) => !/^application\/json$/.test(t)),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...withBody),
        fc.boolean(),
        type,
        fc.oneof(
          rawGarbage.filter((b) => b.length > 0),
          mixedCreate,
        ),
        credArb,
        async (op, bare, ctype, body, cred) => {
          const a = await probe(op, op.rest.verb, restPath(op, bare), body, { "content-type": ctype }, cred);
          if (cred === "valid") expect(a.status).toBe(415);
        },
      ),
      { numRuns: 80 },
    );
  }, 120_000);

  it("dot segments and backslashes in paths are 404", async () => {
    const dot = fc.constantFrom(".", "..", "%2e", "%2E%2e", ".%2e", "%2e.", "\\", "%5c", "a\\b", "..\\..");
    await fc.assert(
      fc.asyncProperty(opArb, fc.nat(4), dot, fc.boolean(), async (op, at, bad, bare) => {
        const segs = restPath(op, bare).split("/");
        const i = 1 + (at % segs.length);
        segs.splice(i, 0, bad);
        const path = segs.join("/");
        const before = await storeFingerprint(srv.app.db);
        const a = await sendRaw(op.rest.verb, path, op.rest.hasBody ? "{}" : undefined, {
          "content-type": "application/json",
        });
        checkAnswer(a, path, `${op.rest.verb} ${path}`);
        expect(a.status, path).toBe(404);
        expect(await storeFingerprint(srv.app.db)).toBe(before);
      }),
      { numRuns: 80 },
    );
  }, 120_000);

  it("parent chains around MAX_TREE_DEPTH: deeper is refused with nothing written", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: MAX_TREE_DEPTH }),
        fc.integer({ min: 1, max: 4 }),
        credArb,
        async (at, length, cred) => {
          const n = ++serial;
          const resources = Array.from({ length }, (_, i) => ({
            identifier: `deep-${n}-${i}`,
            payload_type: "annotation",
            label: "l",
            parent_identifier: i === 0 ? `chain-${at}` : `deep-${n}-${i - 1}`,
          }));
          const create = operations.find((o) => o.method.name === "Create" && o.revision === "v2")!;
          const a = await probe(create, "POST", "/resources/create", JSON.stringify({ resources }), {}, cred);
          // The last new resource has at + length ancestors.
          const tooDeep = at + length > MAX_TREE_DEPTH;
          if (cred === "valid") expect(a.status, a.text).toBe(tooDeep ? 400 : 200);
          if (cred === "valid" && tooDeep) expect(a.text).toContain("failed_precondition");
        },
      ),
      { numRuns: 40 },
    );
  }, 120_000);
});
