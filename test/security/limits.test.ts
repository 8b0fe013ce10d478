// Limits (docs/contract/11-errors.md), all configurable: too many items is 400
// invalid_argument, a body over the limit 413 resource_exhausted over REST
// and resource_exhausted over Connect and gRPC; in every case nothing is
// written. Preview rows and listed keys have their own limits.
import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CreateRequestSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { callRest, callRpc, transportFor, type Protocol } from "./calls.js";
import { storeFingerprint } from "./fingerprint.js";

const MAX_ITEMS = 5;
const MAX_BODY = 4096;
let srv: TestServer;

beforeAll(async () => {
  srv = await startTestServer({
    MAX_BATCH_ITEMS: String(MAX_ITEMS),
    MAX_BODY_BYTES: String(MAX_BODY),
    MAX_PREVIEW_ROWS: "3",
    MAX_LIST_KEYS: "2",
    MAX_QUERY_LIMIT: "3",
  });
  const seeded = await callRest(srv.url, "POST", "/resources/create", {
    body: JSON.stringify({ resources: [{ identifier: "seed", payload_type: "annotation", label: "x" }] }),
  });
  expect(seeded.status).toBe(200);
});
afterAll(async () => {
  await srv?.close();
});

const ids = (n: number, p = "lim") => Array.from({ length: n }, (_, i) => `${p}-${i}`);
const annotations = (n: number, p = "lim") =>
  ids(n, p).map((identifier) => ({ identifier, payload_type: "annotation", label: "l" }));

const overLimit: [string, unknown][] = [
  ["/resources/create", { resources: annotations(MAX_ITEMS + 1) }],
  ["/resources/read", { identifiers: ids(MAX_ITEMS + 1) }],
  ["/resources/update", { updates: Object.fromEntries(ids(MAX_ITEMS + 1).map((id) => [id, { label: "m" }])) }],
  ["/resources/delete", { identifiers: [...ids(MAX_ITEMS), "seed"] }],
  ["/resources/restore", { identifiers: ids(MAX_ITEMS + 1) }],
  ["/s3/presign/batch", { direction: "upload", items: ids(MAX_ITEMS + 1).map((f) => ({ filename: f, group: "g" })) }],
  ["/s3/presign/upload-dir", { group: "g", relpaths: ids(MAX_ITEMS + 1) }],
];

describe("batch limits", () => {
  it.each(overLimit)("%s with one item too many is 400 invalid_argument and writes nothing", async (path, body) => {
    const before = await storeFingerprint(srv.app.db);
    const res = await callRest(srv.url, "POST", path, { body: JSON.stringify(body) });
    expect(res.status).toBe(400);
    expect(res.json).toMatchObject({ code: "invalid_argument", message: expect.stringContaining(String(MAX_ITEMS)) });
    expect(await storeFingerprint(srv.app.db)).toBe(before);
  });

  it("a batch of exactly the limit is served", async () => {
    const res = await callRest(srv.url, "POST", "/resources/create", {
      body: JSON.stringify({ resources: annotations(MAX_ITEMS, "exact") }),
    });
    expect([res.status, res.json]).toEqual([200, { created: MAX_ITEMS }]);
  });

  it.each<Protocol>(["connect-json", "connect-binary", "grpc"])(
    "too many items over %s is invalid_argument",
    async (protocol) => {
      const before = await storeFingerprint(srv.app.db);
      const msg = create(CreateRequestSchema, {
        resources: ids(MAX_ITEMS + 1, protocol).map((identifier) => ({
          identifier,
          payload: { case: "annotation" as const, value: { label: "l" } },
        })),
      });
      const out = await callRpc(transportFor(srv.url, protocol), ResourceService.method.create, msg);
      expect(out.code).toBe(Code.InvalidArgument);
      expect(await storeFingerprint(srv.app.db)).toBe(before);
    },
  );
});

describe("body limit", () => {
  // Many small valid items: under the item limit, over the byte limit.
  const big = { resources: annotations(3, "big").map((r) => ({ ...r, text: "x".repeat(MAX_BODY) })) };

  it("REST: 413 resource_exhausted, with and without content-length, nothing written", async () => {
    const before = await storeFingerprint(srv.app.db);
    const res = await callRest(srv.url, "POST", "/resources/create", { body: JSON.stringify(big) });
    expect([res.status, (res.json as { code: string }).code]).toEqual([413, "resource_exhausted"]);
    // Chunked: the limit holds while streaming, not only on the declared length.
    const body = new Blob([JSON.stringify(big)]).stream();
    const chunked = await fetch(`${srv.url}/resources/create`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
      duplex: "half",
    });
    expect(chunked.status).toBe(413);
    expect(((await chunked.json()) as { code: string }).code).toBe("resource_exhausted");
    expect(await storeFingerprint(srv.app.db)).toBe(before);
  });

  it.each<Protocol>(["connect-json", "connect-binary", "grpc"])(
    "%s: resource_exhausted, nothing written",
    async (protocol) => {
      const before = await storeFingerprint(srv.app.db);
      const msg = create(CreateRequestSchema, {
        resources: ids(3, `big-${protocol}`).map((identifier) => ({
          identifier,
          payload: { case: "annotation" as const, value: { label: "l", text: "x".repeat(MAX_BODY) } },
        })),
      });
      const out = await callRpc(transportFor(srv.url, protocol), ResourceService.method.create, msg);
      expect(out.code).toBe(Code.ResourceExhausted);
      expect(await storeFingerprint(srv.app.db)).toBe(before);
    },
  );
});

describe("query limit", () => {
  it("a limit above MAX_QUERY_LIMIT is 400; without one a page holds at most that many", async () => {
    await callRest(srv.url, "POST", "/resources/create", { body: JSON.stringify({ resources: annotations(4, "q") }) });
    const over = await callRest(srv.url, "POST", "/query", { body: JSON.stringify({ limit: 4 }) });
    expect([over.status, (over.json as { code: string }).code]).toEqual([400, "invalid_argument"]);
    const page = await callRest(srv.url, "POST", "/query", { body: JSON.stringify({}) });
    expect(page.status).toBe(200);
    const body = page.json as { results: unknown[]; next_cursor: string | null };
    expect(body.results).toHaveLength(3);
    expect(body.next_cursor).not.toBeNull();
  });
});

describe("preview and list limits", () => {
  it("a preview limit above MAX_PREVIEW_ROWS is 400", async () => {
    const res = await callRest(srv.url, "GET", "/s3/parquet?path=s3://resources/none.parquet&limit=4");
    expect(res.status).toBe(400);
    expect(res.json).toMatchObject({ code: "invalid_argument", message: expect.stringContaining("3") });
  });

  it("a listing over MAX_LIST_KEYS is 400, under it the keys", async () => {
    const presign = await callRest(srv.url, "POST", "/s3/presign/upload-dir", {
      body: JSON.stringify({ group: "lst", relpaths: ["a", "b", "c"] }),
    });
    expect(presign.status).toBe(200);
    const { root, items } = presign.json as { root: string; items: { url: string }[] };
    for (const item of items.slice(0, 2))
      expect((await fetch(item.url, { method: "PUT", body: "x" })).status).toBe(200);
    const ok = await callRest(srv.url, "GET", `/s3/list?prefix=${encodeURIComponent(root)}`);
    expect(ok.status).toBe(200);
    expect((ok.json as { keys: string[] }).keys).toHaveLength(2);
    expect((await fetch(items[2]!.url, { method: "PUT", body: "x" })).status).toBe(200);
    const over = await callRest(srv.url, "GET", `/s3/list?prefix=${encodeURIComponent(root)}`);
    expect([over.status, (over.json as { code: string }).code]).toEqual([400, "invalid_argument"]);
  });
});

describe("filter nesting (MAX_FILTER_DEPTH, section 16)", () => {
  // Built as text: JSON.stringify itself recurses.
  const nested = (depth: number): string =>
    `{"filters":[${'{"any":['.repeat(depth)}{"field":"identifier","op":"eq","value":"x"}${"]}".repeat(depth)}]}`;
  // 8 groups are served; every deeper one, up to 20,000 (500 before), is 400 invalid_argument.
  it.each([9, 20, 200, 2_000, 20_000])(
    "%i nested any groups: 400 invalid_argument over REST and Connect JSON",
    async (depth) => {
      const big = await startTestServer({ MAX_BODY_BYTES: String(8 * 1024 * 1024) }).catch(() => undefined);
      const target = big ?? srv;
      try {
        const body = nested(depth);
        const rest = await callRest(target.url, "POST", "/query", { body });
        expect([rest.status, (rest.json as { code: string }).code]).toEqual([400, "invalid_argument"]);
        const connect = await fetch(`${target.url}/resourcestore.v2.QueryService/Query`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
        });
        expect([connect.status, ((await connect.json()) as { code: string }).code]).toEqual([400, "invalid_argument"]);
        expect((await callRest(target.url, "POST", "/query", { body: nested(8) })).status).toBe(200);
      } finally {
        await big?.close();
      }
    },
  );
});
