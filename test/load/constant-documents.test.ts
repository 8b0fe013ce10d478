// The documents that cannot change while the process runs are sent from
// memory with an ETag, 304 on a matching If-None-Match, and still behind
// their scope when authentication is on.
import { request } from "node:http";
import { connect as connectH2 } from "node:http2";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";
import { logLines } from "../support/log-lines.js";
import { acceptsGzip, constantDocument, GZIP_MIN_BYTES, matchesEtag } from "../../src/http/constant-document.js";

const paths = ["/schemas", "/v1/schemas", "/v2/schemas", "/s3/config", "/v1/s3/config", "/openapi.json"];

describe("constant documents", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer();
  });
  afterAll(async () => t?.close());

  it.each(paths)("%s: same bytes every time, an ETag, 304 when it matches", async (path) => {
    const first = await fetch(`${t.url}${path}`);
    expect(first.status).toBe(200);
    const etag = first.headers.get("etag");
    expect(etag).toMatch(/^"[A-Za-z0-9_-]+"$/);
    expect(first.headers.get("cache-control")).toBe("no-cache");
    expect(first.headers.get("content-type")).toBe("application/json");
    const body = await first.text();
    expect(JSON.parse(body)).toBeTypeOf("object");
    const second = await fetch(`${t.url}${path}`);
    expect(await second.text()).toBe(body);
    expect(second.headers.get("etag")).toBe(etag);

    const notModified = await fetch(`${t.url}${path}`, { headers: { "if-none-match": `"other", W/${etag!}` } });
    expect(notModified.status).toBe(304);
    expect(notModified.headers.get("etag")).toBe(etag);
    expect(await notModified.text()).toBe("");
    const changed = await fetch(`${t.url}${path}`, { headers: { "if-none-match": '"other"' } });
    expect(changed.status).toBe(200);
    expect(await changed.text()).toBe(body);
  });

  it("schemas over REST are the schemas Connect answers", async () => {
    const rest = (await (await fetch(`${t.url}/schemas`)).json()) as Record<string, unknown>;
    const connect = await fetch(`${t.url}/resourcestore.v1.SchemaService/Schemas`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(connect.status).toBe(200);
    expect(((await connect.json()) as { schemas: unknown }).schemas).toEqual(rest);
    expect(Object.keys(rest).length).toBeGreaterThan(0);
  });
});

/** A GET with exactly these headers (fetch would add Accept-Encoding and undo the gzip). */
function rawGet(
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

describe("constant documents, gzipped for clients that accept it", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer({ CORS_ORIGINS: "https://app.example" });
  });
  afterAll(async () => t?.close());

  it.each(["/openapi.json", "/schemas", "/v1/schemas"])(
    "%s: the same document, its own tag, Vary kept beside CORS's",
    async (path) => {
      const plain = await rawGet(`${t.url}${path}`, { origin: "https://app.example" });
      expect(plain.status).toBe(200);
      expect(plain.headers["content-encoding"]).toBeUndefined();
      expect(plain.headers.vary).toBe("Origin, Accept-Encoding");
      expect(plain.headers["access-control-allow-origin"]).toBe("https://app.example");
      const gz = await rawGet(`${t.url}${path}`, {
        origin: "https://app.example",
        "accept-encoding": "br;q=1, gzip;q=0.8",
      });
      expect(gz.status).toBe(200);
      expect(gz.headers["content-encoding"]).toBe("gzip");
      expect(gz.headers.vary).toBe("Origin, Accept-Encoding");
      expect(Number(gz.headers["content-length"])).toBe(gz.body.length);
      expect(gz.body.length).toBeLessThan(plain.body.length / 2);
      expect(gunzipSync(gz.body).equals(plain.body)).toBe(true);
      // Each representation has its own strong tag, and revalidates against its own.
      expect(gz.headers.etag).not.toBe(plain.headers.etag);
      const again = await rawGet(`${t.url}${path}`, {
        "accept-encoding": "gzip",
        "if-none-match": String(gz.headers.etag),
      });
      expect(again.status).toBe(304);
      expect(again.headers.etag).toBe(gz.headers.etag);
      expect(again.headers["content-encoding"]).toBeUndefined();
      expect(again.headers.vary).toBe("Origin, Accept-Encoding");
      // The gzip tag does not revalidate the plain form: that client gets the document.
      const crossed = await rawGet(`${t.url}${path}`, { "if-none-match": String(gz.headers.etag) });
      expect(crossed.status).toBe(200);
      expect(crossed.body.equals(plain.body)).toBe(true);
      // q=0 refuses gzip.
      const refused = await rawGet(`${t.url}${path}`, { "accept-encoding": "gzip;q=0, *" });
      expect(refused.headers["content-encoding"]).toBeUndefined();
      expect(refused.body.equals(plain.body)).toBe(true);
    },
  );

  it("over HTTP/2 (h2c on the same port) too", async () => {
    const session = connectH2(t.url);
    const get = (headers: Record<string, string>) =>
      new Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }>((resolve, reject) => {
        const stream = session.request({ ":method": "GET", ":path": "/openapi.json", ...headers });
        const chunks: Buffer[] = [];
        let head: Record<string, unknown> = {};
        stream.on("response", (h) => (head = h));
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("end", () =>
          resolve({ status: Number(head[":status"]), headers: head, body: Buffer.concat(chunks) }),
        );
        stream.on("error", reject);
        stream.end();
      });
    try {
      const plain = await get({});
      const gz = await get({ "accept-encoding": "gzip" });
      expect(plain.status).toBe(200);
      expect(gz.status).toBe(200);
      expect(gz.headers["content-encoding"]).toBe("gzip");
      expect(gunzipSync(gz.body).equals(plain.body)).toBe(true);
      const again = await get({ "accept-encoding": "gzip", "if-none-match": String(gz.headers.etag) });
      expect(again.status).toBe(304);
      expect(again.body.length).toBe(0);
    } finally {
      session.close();
    }
  });

  it("a small document goes out as it is, with no Vary on the encoding", async () => {
    const small = await rawGet(`${t.url}/s3/config`, { "accept-encoding": "gzip" });
    expect(small.status).toBe(200);
    expect(small.body.length).toBeLessThan(GZIP_MIN_BYTES);
    expect(small.headers["content-encoding"]).toBeUndefined();
    expect(small.headers.vary).toBe("Origin");
    JSON.parse(small.body.toString());
  });

  it("keeps a gzip form from GZIP_MIN_BYTES up", () => {
    const doc = constantDocument("x".repeat(GZIP_MIN_BYTES));
    expect(gunzipSync(doc.gzip!.body).equals(doc.body)).toBe(true);
    expect(constantDocument("x".repeat(GZIP_MIN_BYTES - 1)).gzip).toBeUndefined();
  });

  it("reads Accept-Encoding as RFC 9110 says", () => {
    expect(acceptsGzip(undefined)).toBe(false);
    expect(acceptsGzip("")).toBe(false);
    expect(acceptsGzip("gzip")).toBe(true);
    expect(acceptsGzip("GZIP;Q=0.5")).toBe(true);
    expect(acceptsGzip("deflate, gzip;q=0")).toBe(false);
    expect(acceptsGzip("gzip;q=0.0, *")).toBe(false);
    expect(acceptsGzip("br, *;q=0.1")).toBe(true);
    expect(acceptsGzip("*;q=0")).toBe(false);
    expect(acceptsGzip("identity")).toBe(false);
    expect(acceptsGzip(["br", "x-gzip"])).toBe(true);
  });
});

describe("constant documents in the call log and metrics", () => {
  let t: TestServer;
  const log = logLines("info");
  beforeAll(async () => {
    t = await startTestServer({}, {}, log.logger);
  });
  afterAll(async () => t?.close());

  it.each([
    ["/schemas", "resourcestore.v2.SchemaService/Schemas"],
    ["/v1/s3/config", "resourcestore.v1.StorageService/Config"],
  ])("%s: every answer, cached or 304, is a call with its log line and its count", async (path, rpc) => {
    const first = await fetch(`${t.url}${path}`);
    const etag = first.headers.get("etag")!;
    await first.text();
    const ids = ["const-a", "const-b", "const-c"];
    for (const id of ids.slice(0, 2))
      expect((await fetch(`${t.url}${path}`, { headers: { "x-request-id": id } })).status).toBe(200);
    expect(
      (await fetch(`${t.url}${path}`, { headers: { "x-request-id": ids[2]!, "if-none-match": etag } })).status,
    ).toBe(304);
    const calls = log.calls((r) => r.rpc === rpc);
    expect(calls).toHaveLength(4);
    for (const id of ids)
      expect(calls.find((c) => c.request_id === id)).toMatchObject({ code: "ok", duration_ms: expect.any(Number) });
    const text = await (await fetch(`${t.url}/metrics`)).text();
    const count = new RegExp(
      `^rs_requests_total\\{route="/${rpc.replace(/\./g, "\\.")}",code="ok"\\} (\\d+)`,
      "m",
    ).exec(text)?.[1];
    expect(Number(count)).toBe(4);
    expect(text).toMatch(
      new RegExp(`^rs_request_duration_seconds_count\\{route="/${rpc.replace(/\./g, "\\.")}",code="ok"\\} 4$`, "m"),
    );
  });
});

describe("constant documents with authentication on", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer({ API_TOKENS: "reader=read" });
  });
  afterAll(async () => t?.close());

  it.each(["/schemas", "/s3/config"])("%s still needs a token once it is cached", async (path) => {
    const ok = await fetch(`${t.url}${path}`, { headers: { authorization: "Bearer reader" } });
    expect(ok.status).toBe(200);
    const etag = ok.headers.get("etag")!;
    expect((await fetch(`${t.url}${path}`)).status).toBe(401);
    expect((await fetch(`${t.url}${path}`, { headers: { "if-none-match": etag } })).status).toBe(401);
    expect(
      (await fetch(`${t.url}${path}`, { headers: { authorization: "Bearer wrong", "if-none-match": etag } })).status,
    ).toBe(401);
    expect(
      (await fetch(`${t.url}${path}`, { headers: { authorization: "Bearer reader", "if-none-match": etag } })).status,
    ).toBe(304);
  });
});

describe("If-None-Match", () => {
  it("matches a listed tag, a weak one, or *", () => {
    expect(matchesEtag(undefined, '"a"')).toBe(false);
    expect(matchesEtag('"b", "a"', '"a"')).toBe(true);
    expect(matchesEtag('W/"a"', '"a"')).toBe(true);
    expect(matchesEtag("*", '"a"')).toBe(true);
    expect(matchesEtag('"ab"', '"a"')).toBe(false);
  });
});
