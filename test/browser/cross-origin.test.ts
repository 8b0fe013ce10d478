// A page served from a second origin (another local port) calls the
// service over Connect JSON from a real browser: the call works when
// CORS_ORIGINS names that origin, and the browser refuses it when not.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser } from "playwright-core";
import { startTestServer, type TestServer } from "../support/app.js";
import { launchChromium } from "./chromium.js";

const PAGE = `<!doctype html><html><head><meta charset="utf-8"><title>other origin</title></head><body>
<script>
window.callService = async (base) => {
  try {
    const res = await fetch(base + "/resourcestore.v2.QueryService/Count", {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-request-id": "cross-origin-test" },
      body: JSON.stringify({ payload_type: "study" }),
    });
    return { ok: true, status: res.status, body: await res.json(), requestId: res.headers.get("x-request-id") };
  } catch (err) {
    return { ok: false, error: String(err) };
  }
};
</script></body></html>`;

describe("a page on another origin calling Connect JSON", () => {
  let pageServer: http.Server;
  let pageOrigin: string;
  let withCors: TestServer;
  let withoutCors: TestServer;
  let browser: Browser;

  beforeAll(async () => {
    pageServer = http.createServer((_req, res) => {
      res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
      res.end(PAGE);
    });
    await new Promise<void>((resolve) => pageServer.listen(0, "127.0.0.1", resolve));
    pageOrigin = `http://127.0.0.1:${(pageServer.address() as AddressInfo).port}`;
    [withCors, withoutCors, browser] = await Promise.all([
      startTestServer({ CORS_ORIGINS: pageOrigin }),
      startTestServer(),
      launchChromium(),
    ]);
    for (const s of [withCors, withoutCors]) {
      const res = await fetch(`${s.url}/resources/create`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ resources: [{ identifier: "st-1", payload_type: "study", modality: "CT" }] }),
      });
      expect(res.status).toBe(200);
    }
  });
  afterAll(async () => {
    await browser?.close();
    await Promise.all([withCors?.close(), withoutCors?.close()]);
    await new Promise((resolve) => pageServer?.close(resolve));
  });

  it("works when CORS_ORIGINS names the page's origin", async () => {
    const page = await browser.newPage();
    await page.goto(pageOrigin + "/");
    const answer = await page.evaluate(
      (base) => (globalThis as unknown as { callService: (b: string) => Promise<unknown> }).callService(base),
      withCors.url,
    );
    expect(answer).toEqual({ ok: true, status: 200, body: { count: "1" }, requestId: "cross-origin-test" });
    await page.close();
  });

  it("is refused by the browser when CORS_ORIGINS does not name it", async () => {
    const page = await browser.newPage();
    await page.goto(pageOrigin + "/");
    const answer = await page.evaluate(
      (base) => (globalThis as unknown as { callService: (b: string) => Promise<unknown> }).callService(base),
      withoutCors.url,
    );
    expect(answer).toMatchObject({ ok: false, error: expect.stringContaining("Failed to fetch") });
    await page.close();
  });
});
