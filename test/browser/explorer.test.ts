// The explorer end to end in Chromium: data made through the API, then the
// tree, the time slider and the as_of input (a deleted subtree reappears
// before its deletion, an update reverts), a query with its rows and count,
// the parquet download read back, an upload through a presigned URL and its
// preview, and the token prompt. Screenshots go to test-artefacts/browser.
import { copyFile, mkdtemp, readFile, rm } from "node:fs/promises";
import { request as httpRequest } from "node:http";
import { gunzipSync } from "node:zlib";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parquetReadObjects } from "hyparquet";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildUi } from "../../scripts/build-ui.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { restCaller } from "../support/rest.js";
import { ARTEFACTS, launchChromium } from "./chromium.js";

/** docs/browsers.md's screenshots of each panel are refreshed by the run when this is set. */
const DOCS_SHOTS =
  process.env.UPDATE_DOCS_SCREENSHOTS === "1" ? join(import.meta.dirname, "..", "..", "docs") : undefined;

/** A screenshot of one part of the page, into the artefacts and, when asked, into docs/. */
async function shoot(target: Page | ReturnType<Page["locator"]>, name: string): Promise<void> {
  const path = join(ARTEFACTS, name);
  await target.screenshot({ path });
  if (DOCS_SHOTS !== undefined) await copyFile(path, join(DOCS_SHOTS, name));
}

/** axe-core's serious and critical violations on the page as it is (the page must bypass its CSP to take the script). */
async function seriousViolations(page: Page): Promise<string[]> {
  if (!(await page.evaluate("typeof axe !== 'undefined'")))
    await page.addScriptTag({ path: join(import.meta.dirname, "..", "..", "node_modules", "axe-core", "axe.min.js") });
  const result = await page.evaluate<{ violations: { id: string; impact: string; nodes: { target: string[] }[] }[] }>(
    "axe.run(document, { resultTypes: ['violations'] })",
  );
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
}

/** The README's screenshot is refreshed by the run when this is set. */
const README_SHOT =
  process.env.UPDATE_README_SCREENSHOT === "1"
    ? join(import.meta.dirname, "..", "..", "docs", "explorer.png")
    : undefined;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Microseconds since the epoch of an API stamp, and back. */
function micros(stamp: string): bigint {
  const m = /^(.*T\d{2}:\d{2}:\d{2})(?:\.(\d{1,6}))?Z$/.exec(stamp);
  if (m === null) throw new Error(stamp);
  return BigInt(Date.parse(`${m[1]}Z`)) * 1000n + BigInt((m[2] ?? "").padEnd(6, "0"));
}
function stamp(us: bigint): string {
  return `${new Date(Number(us / 1_000_000n) * 1000).toISOString().slice(0, 19)}.${String(us % 1_000_000n).padStart(6, "0")}Z`;
}

describe("the explorer in Chromium", () => {
  let server: TestServer;
  let uiDir: string;
  let browser: Browser;
  let page: Page;
  const { get, post } = restCaller(() => server.url);
  let createdAt: string;
  let updatedAt: string;

  const treeItem = (id: string) => page.locator(`[role="treeitem"][data-id="${id}"]`);

  beforeAll(async () => {
    uiDir = await mkdtemp(join(tmpdir(), "rs-ui-"));
    await buildUi(uiDir);
    // A parent with more than 3 children is paged through Query (docs/contract/05-lineage.md).
    [server, browser] = await Promise.all([startTestServer({ MAX_CHILDREN: "3" }, { uiDir }), launchChromium()]);
    const created = await post("/resources/create", {
      resources: [
        { identifier: "ds-a", payload_type: "datasource", name: "Hospital A", country: "NL" },
        {
          identifier: "pat-1",
          payload_type: "patient",
          parent_identifier: "ds-a",
          datasource_id: "ds-a",
          sex: "female",
          birth_year: 1970,
        },
        {
          identifier: "stu-1",
          payload_type: "study",
          parent_identifier: "pat-1",
          modality: "CT",
          study_date: "2024-03-01",
          description: "chest",
        },
        {
          identifier: "stu-2",
          payload_type: "study",
          parent_identifier: "pat-1",
          modality: "MR",
          study_date: "2024-04-02",
        },
        {
          identifier: "stu-3",
          payload_type: "study",
          parent_identifier: "pat-1",
          modality: "MR",
          study_date: "2024-05-03",
        },
        {
          identifier: "ser-1",
          payload_type: "series",
          parent_identifier: "stu-1",
          modality: "CT",
          series_number: 1,
          instance_count: 120,
        },
        { identifier: "ds-gone", payload_type: "datasource", name: "Withdrawn" },
        { identifier: "pat-gone", payload_type: "patient", parent_identifier: "ds-gone", datasource_id: "ds-gone" },
      ],
    });
    expect(created).toMatchObject({ status: 200, json: { created: 8 } });
    const read = await post("/resources/read", { identifiers: ["ds-gone"] });
    createdAt = read.json[0].updated_at;
    // Later commits get later stamps; the pause keeps a whole millisecond
    // (the slider's step) between the creation and the delete.
    await sleep(30);
    expect(await post("/resources/delete", { identifiers: ["ds-gone"] })).toMatchObject({
      status: 200,
      json: { deleted: 2 },
    });
    expect(
      await post("/resources/update", { updates: { "stu-1": { modality: "MR", description: "chest, contrast" } } }),
    ).toMatchObject({ status: 200, json: { updated: 1 } });
    updatedAt = (await post("/resources/read", { identifiers: ["stu-1"] })).json[0].updated_at;
    page = await browser.newPage({ viewport: { width: 1360, height: 900 }, acceptDownloads: true });
  });

  afterAll(async () => {
    await browser?.close();
    await server?.close();
    if (uiDir !== undefined) await rm(uiDir, { recursive: true, force: true });
  });

  it("serves the page without credentials: / redirects to /ui/, assets are cached", async () => {
    const root = await fetch(server.url + "/", { redirect: "manual" });
    expect(root.status).toBe(302);
    expect(root.headers.get("location")).toBe("/ui/");
    const index = await fetch(server.url + "/ui/");
    expect(index.status).toBe(200);
    expect(index.headers.get("cache-control")).toBe("no-cache");
    const etag = index.headers.get("etag");
    expect(etag).toBeTruthy();
    const html = await index.text();
    expect((await fetch(server.url + "/ui/", { headers: { "if-none-match": etag ?? "" } })).status).toBe(304);
    const script = /src="(\/ui\/main-[A-Z0-9]+\.js)"/.exec(html)?.[1];
    expect(script).toBeDefined();
    const asset = await fetch(server.url + (script ?? ""));
    expect(asset.status).toBe(200);
    expect(asset.headers.get("content-type")).toMatch(/^text\/javascript/);
    expect(asset.headers.get("cache-control")).toContain("immutable");
    const plain = Buffer.from(await asset.arrayBuffer());
    // A browser gets the script gzipped (its own ETag, Vary), a HEAD the headers only.
    const raw = (method: string, headers: Record<string, string>) =>
      new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }>(
        (resolve, reject) => {
          const req = httpRequest(server.url + (script ?? ""), { method, headers }, (res) => {
            const chunks: Buffer[] = [];
            res.on("data", (c: Buffer) => chunks.push(c));
            res.on("end", () =>
              resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
            );
          });
          req.on("error", reject);
          req.end();
        },
      );
    const gz = await raw("GET", { "accept-encoding": "gzip, deflate, br" });
    expect(gz.headers["content-encoding"]).toBe("gzip");
    expect(gz.headers.vary).toBe("Accept-Encoding");
    expect(gz.headers["cache-control"]).toContain("immutable");
    expect(gunzipSync(gz.body).equals(plain)).toBe(true);
    expect(gz.body.length).toBeLessThan(plain.length / 2);
    expect((await raw("GET", { "accept-encoding": "gzip", "if-none-match": String(gz.headers.etag) })).status).toBe(
      304,
    );
    const head = await raw("HEAD", {});
    expect(head.status).toBe(200);
    expect(Number(head.headers["content-length"])).toBe(plain.length);
    expect(head.body.length).toBe(0);
    expect((await fetch(server.url + "/ui/nope.js")).status).toBe(404);
  });

  it("shows the tree from the roots, lazily, with child counts and a payload preview", async () => {
    await page.goto(server.url + "/");
    await expect.poll(() => page.url()).toContain("/ui/");
    await treeItem("ds-a").waitFor();
    // Authentication off: WhoAmI names the local caller, with every scope and grant, in the header.
    expect(await get("/whoami")).toMatchObject({
      status: 200,
      json: { actor: "local", scopes: ["read", "write", "admin"], authenticated: false },
    });
    await expect
      .poll(() => page.locator("#whoami").innerText())
      .toBe("local · read, write, admin · every datasource · up to restricted");
    expect(await treeItem("ds-gone").count()).toBe(0);
    await expect
      .poll(() => treeItem("ds-a").locator(":scope > .label").innerText())
      .toMatch(/1 child[\s\S]*name: Hospital A/);
    expect(await treeItem("pat-1").isVisible()).toBe(false);
    // Keyboard: focus the first item, open it with the right arrow, go down.
    await treeItem("ds-a").focus();
    await page.keyboard.press("ArrowRight");
    await treeItem("pat-1").waitFor();
    await expect.poll(() => treeItem("pat-1").locator(":scope > .label").innerText()).toContain("3 children");
    await page.keyboard.press("ArrowDown");
    await page.keyboard.press("ArrowRight");
    await treeItem("stu-1").waitFor();
    await treeItem("stu-1").locator(":scope > .label .id").click();
    await expect.poll(() => page.locator(".detail-panel").innerText()).toContain("chest, contrast");
    expect(page.url()).toContain("id=stu-1");
    await page.screenshot({ path: join(ARTEFACTS, "explorer-tree.png") });
  });

  it("shows every field, the version and the history of a resource", async () => {
    const detail = page.locator(".detail-panel");
    await expect.poll(() => detail.locator(".history li").count()).toBe(2);
    const text = await detail.innerText();
    expect(text).toMatch(/version 2/);
    for (const field of [
      "identifier",
      "payload_type",
      "parent_identifier",
      "license",
      "access_level",
      "derived_from",
      "created_at",
      "updated_at",
      "modality",
      "study_date",
      "description",
    ]) {
      expect(text).toContain(field);
    }
    expect(text).toContain(updatedAt);
    const history = await detail.locator(".history").innerText();
    expect(history).toMatch(/modality: CT → MR/);
    // From the History call: each version's kind and actor (authentication off: local).
    expect(history).toMatch(/v1 \S+ created by local/);
    expect(history).toMatch(/v2 \S+ updated by local/);
    expect(await detail.locator(".crumbs").innerText()).toMatch(/ds-a \/ pat-1 \/ stu-1/);
  });

  it("moves the slider to before the delete: the deleted subtree reappears", async () => {
    const slider = page.locator("#as-of-slider");
    const steps = await page.evaluate("history.length");
    // One step per change on screen (the oldest is the first batch), a tick for each, and now at the end.
    await expect.poll(() => page.locator("#as-of-marks option").count()).toBeGreaterThanOrEqual(3);
    expect(await slider.getAttribute("list")).toBe("as-of-marks");
    expect(await slider.getAttribute("max")).toBe(String((await page.locator("#as-of-marks option").count()) - 1));
    await slider.focus();
    await page.keyboard.press("Home");
    await expect.poll(() => page.url()).toContain(`as_of=${encodeURIComponent(createdAt)}`);
    await treeItem("ds-gone").waitFor();
    await treeItem("ds-gone").locator(":scope > .label .toggle").click();
    await treeItem("pat-gone").waitFor();
    // What the reader had opened stays open at the new read point.
    await treeItem("pat-1").waitFor({ state: "visible", timeout: 10_000 });
    expect(await page.locator("#as-of-shown").innerText()).toContain(createdAt);
    // The statistics follow the read point: the withdrawn datasource is counted before its delete.
    await expect.poll(() => page.locator(".stats-panel").innerText()).toContain("ds-gone");
    // One step right is the next change exactly (not a millisecond), and no step is a browser-history entry.
    await slider.focus();
    await page.keyboard.press("ArrowRight");
    await expect.poll(() => page.url()).not.toContain(encodeURIComponent(createdAt));
    const next = decodeURIComponent(/as_of=([^&]+)/.exec(page.url())?.[1] ?? "");
    expect(micros(next) > micros(createdAt)).toBe(true);
    expect(
      await page.locator("#as-of-marks option").evaluateAll((os) => os.map((o) => o.getAttribute("label"))),
    ).toContain(next);
    expect(await page.evaluate("history.length")).toBe(steps);
    await page.keyboard.press("Home");
    await expect.poll(() => page.url()).toContain(encodeURIComponent(createdAt));
    await page.screenshot({ path: join(ARTEFACTS, "explorer-past.png") });
    await page.getByRole("button", { name: "Now", exact: true }).click();
    await expect.poll(() => treeItem("ds-gone").count()).toBe(0);
    expect(page.url()).not.toContain("as_of=");
    await expect.poll(() => page.locator(".stats-panel").innerText()).not.toContain("ds-gone");
  });

  it("takes an instant to the microsecond, in a shareable URL: an update reverts", async () => {
    const before = stamp(micros(updatedAt) - 1n);
    await page.goto(`${server.url}/ui/?id=stu-1&as_of=${encodeURIComponent(before)}`);
    const detail = page.locator(".detail-panel");
    await expect.poll(() => detail.innerText()).toMatch(/version 1/);
    // The fields as of that instant (the history below lists every version, later ones too).
    const text = await detail.locator("table.fields").innerText();
    expect(text).toMatch(/modality\s+CT/);
    expect(text).not.toContain("contrast");
    expect(await page.locator("#as-of-input").inputValue()).toBe(before);
    // The same through the input field.
    await page.locator("#as-of-input").fill(updatedAt);
    await page.locator("#as-of-input").press("Enter");
    await expect.poll(() => detail.innerText()).toMatch(/version 2/);
    expect(await detail.innerText()).toMatch(/modality\s+MR/);
    await page.getByRole("button", { name: "Now", exact: true }).click();
  });

  let downloaded: string;
  it("builds a query from the type's schema, counts it, pages it and downloads it as parquet", async () => {
    await page.locator("#q-type").selectOption("study");
    await page.getByRole("button", { name: "+ Filter" }).click();
    await page.locator(".filter .f-field").selectOption("modality");
    await page.locator(".filter .f-val").fill("MR");
    await page.locator("#q-sort").selectOption("study_date");
    await page.locator("#q-order").selectOption("asc");
    await page.locator("#q-limit").fill("2");
    await page.getByRole("button", { name: "Run query" }).click();
    await expect.poll(() => page.locator("#q-count").innerText()).toBe("3 results");
    const ids = () => page.locator(".results tbody tr td:first-child").allInnerTexts();
    expect(await ids()).toEqual(["stu-1", "stu-2"]);
    await page.getByRole("button", { name: "Next page →" }).click();
    await expect.poll(ids).toEqual(["stu-3"]);
    expect(await page.getByRole("button", { name: "Next page →" }).isDisabled()).toBe(true);
    await page.getByRole("button", { name: "← Previous page" }).click();
    await expect.poll(ids).toEqual(["stu-1", "stu-2"]);
    await page.screenshot({ path: join(ARTEFACTS, "explorer-query.png"), fullPage: true });

    const [download] = await Promise.all([
      page.waitForEvent("download"),
      page.getByRole("button", { name: "Download parquet" }).click(),
    ]);
    expect(download.suggestedFilename()).toBe("study.parquet");
    downloaded = join(ARTEFACTS, "study.parquet");
    await download.saveAs(downloaded);
    const bytes = await readFile(downloaded);
    const rows = await parquetReadObjects({
      file: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength),
    });
    expect(rows.map((r) => [r.identifier, r.modality, r.study_date])).toEqual([
      ["stu-1", "MR", "2024-03-01"],
      ["stu-2", "MR", "2024-04-02"],
      ["stu-3", "MR", "2024-05-03"],
    ]);
  });

  it("uploads a file to a group through a presigned URL and previews it", async () => {
    await page.locator("#up-group").fill("browser/tests");
    await page.locator("#up-file").setInputFiles(downloaded);
    await page.getByRole("button", { name: "Upload", exact: true }).click();
    await expect
      .poll(() => page.locator(".storage-panel .status").first().innerText())
      .toMatch(/^Uploaded \d+ bytes to s3:\/\//);
    expect(
      await page.locator("#up-progress").evaluate((el) => {
        const p = el as unknown as { value: number; max: number };
        return p.value === p.max;
      }),
    ).toBe(true);
    const path = await page.locator(".uploaded-path").innerText();
    expect(path).toMatch(/^s3:\/\/[^/]+\/browser\/tests\/[^/]+\/study\.parquet$/);
    // The object is there, and the service's own preview of it agrees.
    const api = await get(`/s3/parquet?path=${encodeURIComponent(path)}`);
    expect(api.json.total_rows).toBe(3);
    await page.getByRole("button", { name: "Preview it" }).click();
    await expect.poll(() => page.locator(".preview-out tbody tr").count()).toBe(3);
    expect(await page.locator(".storage-panel").innerText()).toMatch(/3 rows in the object/);
    expect(await page.locator(".preview-out tbody").innerText()).toContain("stu-3");
    await page.screenshot({ path: join(ARTEFACTS, "explorer-storage.png"), fullPage: true });
  });

  it("follows the change feed live: a create and a delete appear, the identifier opens the resource", async () => {
    await page.goto(`${server.url}/ui/`);
    const feed = page.locator(".feed-panel");
    const rows = feed.locator("tbody tr");
    await page.getByLabel("Payload types").fill("study");
    await page.getByRole("button", { name: "Start" }).click();
    expect(await page.locator("#feed-toggle").getAttribute("aria-pressed")).toBe("true");
    // The first message (a heartbeat) gives the read point: from here on nothing is missed. The
    // status says the feed is live, not the server's read point (which read as a lag).
    await expect.poll(() => feed.locator(".status").innerText()).toMatch(/^Following live since /);
    expect(await feed.locator(".status").innerText()).not.toContain("read up to");
    expect(await rows.count()).toBe(0);
    expect(
      await post("/resources/create", {
        resources: [
          {
            identifier: "stu-live",
            payload_type: "study",
            parent_identifier: "pat-1",
            modality: "US",
            study_date: "2024-06-04",
          },
        ],
      }),
    ).toMatchObject({ status: 200, json: { created: 1 } });
    // Filtered out: another type.
    expect(
      await post("/resources/create", {
        resources: [{ identifier: "ds-live", payload_type: "datasource", name: "Not a study" }],
      }),
    ).toMatchObject({ status: 200 });
    expect(await post("/resources/delete", { identifiers: ["stu-live"] })).toMatchObject({
      status: 200,
      json: { deleted: 1 },
    });
    await expect.poll(() => rows.count()).toBe(2);
    const cells = async (i: number) => (await rows.nth(i).locator("td").allInnerTexts()).slice(1);
    // Newest first.
    // Each with who wrote it (authentication off: local).
    expect(await cells(0)).toEqual(["stu-live", "study", "deleted", "2", "local"]);
    expect(await feed.locator("thead th").allInnerTexts()).toContain("actor");
    expect(await cells(1)).toEqual(["stu-live", "study", "created", "1", "local"]);
    expect(await rows.nth(0).locator("td").first().innerText()).toMatch(
      /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/,
    );
    expect(await feed.innerText()).not.toContain("ds-live");
    expect(await page.locator("#feed-live").getAttribute("aria-live")).toBe("polite");
    expect(await page.locator("#feed-live").innerText()).toContain("deleted study stu-live version 2");
    await page.screenshot({ path: join(ARTEFACTS, "explorer-feed.png"), fullPage: true });
    // The identifier opens the resource (by keyboard).
    await rows.nth(1).getByRole("button", { name: "stu-live" }).focus();
    await page.keyboard.press("Enter");
    await expect.poll(() => page.url()).toContain("id=stu-live");
    await expect.poll(() => page.locator(".detail-panel").innerText()).toContain("stu-live");
    await page.getByRole("button", { name: "Stop" }).click();
    expect(await page.locator("#feed-toggle").getAttribute("aria-pressed")).toBe("false");
    expect(await feed.locator(".status").innerText()).toBe("Stopped.");
  });

  it("resumes the feed from the last `at` after the stream ends", async () => {
    // A commit made before the panel starts: only a resume from an earlier `at` can show it.
    expect(
      await post("/resources/create", {
        resources: [
          {
            identifier: "stu-replay",
            payload_type: "study",
            parent_identifier: "pat-1",
            modality: "CT",
            study_date: "2024-07-05",
          },
        ],
      }),
    ).toMatchObject({ status: 200 });
    const before = stamp(
      micros((await post("/resources/read", { identifiers: ["stu-replay"] })).json[0].updated_at) - 1n,
    );
    await page.goto(`${server.url}/ui/`);
    // The first stream says "read up to `before`" and ends, as a server going away would.
    const envelope = (flags: number, json: unknown) => {
      const body = Buffer.from(JSON.stringify(json));
      const head = Buffer.alloc(5);
      head.writeUInt8(flags, 0);
      head.writeUInt32BE(body.length, 1);
      return Buffer.concat([head, body]);
    };
    const sent: unknown[] = [];
    let first = true;
    await page.route("**/resourcestore.v2.EventService/Watch", async (route) => {
      // A streaming request is one envelope too: 5 bytes of flags and length, then the JSON.
      const body = JSON.parse((route.request().postDataBuffer() ?? Buffer.alloc(5)).subarray(5).toString() || "{}");
      // The page's own background feed (which keeps "now" live) asks for every type: not this panel's.
      if (!("payloadTypes" in body)) return route.continue();
      sent.push(body);
      if (!first) return route.continue();
      first = false;
      await route.fulfill({
        status: 200,
        contentType: "application/connect+json",
        body: Buffer.concat([envelope(0, { at: before }), envelope(2, {})]),
      });
    });
    const rows = page.locator(".feed-panel tbody tr");
    await page.getByLabel("Payload types").fill("study");
    await page.getByRole("button", { name: "Start" }).click();
    await expect.poll(() => rows.count()).toBe(1);
    expect((await rows.nth(0).locator("td").allInnerTexts()).slice(1)).toEqual([
      "stu-replay",
      "study",
      "created",
      "1",
      "local",
    ]);
    expect(sent).toHaveLength(2);
    expect(sent[0]).not.toHaveProperty("since");
    expect(sent[1]).toMatchObject({ since: before, payloadTypes: ["study"] });
    await page.getByRole("button", { name: "Stop" }).click();
    await page.unrouteAll({ behavior: "ignoreErrors" });
    expect(await post("/resources/delete", { identifiers: ["stu-replay"] })).toMatchObject({ status: 200 });
  });

  it("takes the README screenshot", async () => {
    await page.goto(`${server.url}/ui/?id=stu-1`);
    await treeItem("ds-a").locator(":scope > .label .toggle").click();
    await treeItem("pat-1").locator(":scope > .label .toggle").click();
    await treeItem("stu-1").locator(":scope > .label .toggle").click();
    await treeItem("ser-1").waitFor();
    await expect.poll(() => page.locator(".detail-panel .history li").count()).toBe(2);
    await page.locator("#q-type").selectOption("study");
    await page.getByRole("button", { name: "Run query" }).click();
    await expect.poll(() => page.locator("#q-count").innerText()).toBe("3 results");
    const shot = join(ARTEFACTS, "explorer.png");
    await page.evaluate("window.scrollTo(0, 0)");
    await page.screenshot({ path: shot });
    if (README_SHOT !== undefined) await copyFile(shot, README_SHOT);
  });

  it("pages the whole history and compares two versions field by field", async () => {
    expect(
      await post("/resources/create", {
        resources: [
          {
            identifier: "stu-many",
            payload_type: "study",
            parent_identifier: "ds-a",
            modality: "CT",
            description: "v1",
          },
        ],
      }),
    ).toMatchObject({ status: 200 });
    // 24 updates and a delete and a restore: 27 versions, more than one page of 20.
    for (let i = 2; i <= 25; i++) {
      expect(
        await post("/resources/update", {
          updates: { "stu-many": { description: `v${i}`, ...(i === 3 ? { modality: "MR" } : {}) } },
        }),
      ).toMatchObject({ status: 200 });
    }
    expect(await post("/resources/delete", { identifiers: ["stu-many"] })).toMatchObject({
      status: 200,
      json: { deleted: 1 },
    });
    expect(await post("/v2/resources/restore", { identifiers: ["stu-many"] })).toMatchObject({
      status: 200,
      json: { restored: 1 },
    });
    await page.goto(`${server.url}/ui/?id=stu-many`);
    const detail = page.locator(".detail-panel");
    // Newest first, counted: the latest is on top without a click.
    await expect.poll(() => detail.locator(".history li").count()).toBe(20);
    expect(await detail.locator(".history-count").innerText()).toMatch(/^27 versions/);
    const first = await detail.locator(".history li").allInnerTexts();
    expect(first[0]).toMatch(/^\s*v27 \S+ restored by local/);
    expect(first[1]).toMatch(/^\s*v26 \S+ deleted by local/);
    await detail.getByRole("button", { name: "Show older versions (7 more)" }).click();
    await expect.poll(() => detail.locator(".history li").count()).toBe(27);
    expect(await detail.getByRole("button", { name: /Show older versions/ }).isVisible()).toBe(false);
    expect((await detail.locator(".history li").allInnerTexts())[26]).toMatch(/^\s*v1 \S+ created by local/);
    // Versions 2 and 4: description and modality differ.
    await detail.getByRole("checkbox", { name: "Compare version 2", exact: true }).check();
    await detail.getByRole("checkbox", { name: "Compare version 4", exact: true }).check();
    const table = detail.locator("table.compare");
    await table.waitFor();
    const changed = await table.locator("tr.changed th").allInnerTexts();
    expect(changed).toEqual(expect.arrayContaining(["description", "modality", "version", "updated_at"]));
    expect(changed).not.toContain("identifier");
    expect(await table.locator("tr", { hasText: "modality" }).innerText()).toMatch(/CT\s+MR/);
    // The comparison sits above the list, not below 27 versions.
    const [tableBox, listBox] = await Promise.all([table.boundingBox(), detail.locator(".history").boundingBox()]);
    expect(tableBox !== null && listBox !== null && tableBox.y < listBox.y).toBe(true);
    await page.screenshot({ path: join(ARTEFACTS, "explorer-history.png") });
    // In a past view the version on screen is marked in the list.
    const v3 = /\d{4}-\S+Z/.exec(await detail.locator('.history li[data-version="3"]').innerText())?.[0] ?? "";
    await detail.locator('.history li[data-version="3"]').getByRole("button", { name: "v3" }).click();
    await expect.poll(() => detail.locator('.history li[aria-current="true"]').getAttribute("data-version")).toBe("3");
    expect(page.url()).toContain(encodeURIComponent(v3));
    expect(await detail.locator('.history li[aria-current="true"]').innerText()).toContain("(on screen)");
  });

  it("finds a deleted resource through its history and shows it just before the delete", async () => {
    await page.goto(`${server.url}/ui/?id=ds-gone`);
    const detail = page.locator(".detail-panel");
    await expect.poll(() => detail.locator(".absent").innerText()).toMatch(/^Deleted: version 2, at \S+ by local\./);
    expect(await detail.locator(".history li").count()).toBe(2);
    await detail.getByRole("button", { name: "Show it just before it was deleted" }).click();
    await expect.poll(() => detail.locator("table.fields").innerText()).toContain("Withdrawn");
    expect(page.url()).toContain("as_of=");
  });

  it("at now, shows a new version and a new child written while the page is open", async () => {
    await page.goto(`${server.url}/ui/?id=stu-2`);
    const detail = page.locator(".detail-panel");
    await expect.poll(() => detail.innerText()).toMatch(/version 1/);
    await treeItem("ds-a").locator(":scope > .label .toggle").click();
    await treeItem("stu-many").waitFor();
    expect(await post("/resources/update", { updates: { "stu-2": { description: "written later" } } })).toMatchObject({
      status: 200,
    });
    expect(
      await post("/resources/create", {
        resources: [
          { identifier: "pat-late", payload_type: "patient", parent_identifier: "ds-a", datasource_id: "ds-a" },
        ],
      }),
    ).toMatchObject({ status: 200 });
    await expect.poll(() => detail.innerText(), { timeout: 10_000 }).toMatch(/version 2/);
    expect(await detail.locator("table.fields").innerText()).toContain("written later");
    await treeItem("pat-late").waitFor({ timeout: 10_000 });
    // Without the feed (it cannot be opened), "Now" at now reads everything again.
    await page.route("**/EventService/Watch", (route) => route.abort("connectionrefused"));
    await page.reload();
    await expect.poll(() => detail.innerText()).toMatch(/version 2/);
    expect(await post("/resources/update", { updates: { "stu-2": { description: "read on Now" } } })).toMatchObject({
      status: 200,
    });
    await page.getByRole("button", { name: "Now", exact: true }).click();
    await expect.poll(() => detail.locator("table.fields").innerText()).toContain("read on Now");
    await page.unrouteAll({ behavior: "ignoreErrors" });
  });

  it("refuses an empty number filter, shows access levels, and learns leaves without asking again", async () => {
    await page.goto(`${server.url}/ui/`);
    await page.locator("#q-type").selectOption("series");
    await page.getByRole("button", { name: "+ Filter" }).click();
    await page.locator(".filter .f-field").selectOption("series_number");
    await page.getByRole("button", { name: "Run query" }).click();
    await expect
      .poll(() => page.locator(".query-panel .status").innerText())
      .toBe("Enter a whole number for series_number.");
    expect(await page.locator("#q-count").innerText()).toBe("");
    await page.locator(".filter .f-val").fill("1");
    await page.getByRole("button", { name: "Run query" }).click();
    await expect.poll(() => page.locator("#q-count").innerText()).toBe("1 result");
    expect(await page.locator(".results thead th").allInnerTexts()).toContain("access_level");
    expect(await page.locator(".results tbody td").allInnerTexts()).toContain("internal");

    // pat-1 gets a fourth study: more than MAX_CHILDREN, so it is paged through Query, its rows' counts unknown.
    expect(
      await post("/resources/create", {
        resources: [{ identifier: "stu-4", payload_type: "study", parent_identifier: "pat-1", modality: "CT" }],
      }),
    ).toMatchObject({ status: 200 });
    const refused: string[] = [];
    page.on("response", (r) => {
      if (r.status() === 400) refused.push(r.url());
    });
    await page.reload();
    await treeItem("ds-a").locator(":scope > .label .toggle").click();
    await treeItem("pat-1").locator(":scope > .label .toggle").click();
    await treeItem("stu-4").waitFor();
    // Opening a leaf finds nothing: from then on it has no arrow and is not expandable.
    await treeItem("stu-4").locator(":scope > .label .toggle").click();
    await expect.poll(() => treeItem("stu-4").getAttribute("aria-expanded")).toBeNull();
    expect(await treeItem("stu-4").locator(":scope > .label .toggle").innerText()).toBe("·");
    // Another read point lists pat-1 again: straight through Query, no second 400.
    await page.locator("#as-of-input").fill(stamp(micros(new Date().toISOString().replace("Z", "000Z")) - 1n));
    await page.locator("#as-of-input").press("Enter");
    await treeItem("stu-4").waitFor();
    expect(refused).toHaveLength(1);
    await page.getByRole("button", { name: "Now", exact: true }).click();
  });

  it("is accessible (axe finds no serious or critical violation) and loads in under 100 KB", async () => {
    // A page of its own: axe is injected as a script, which the explorer's content security policy forbids.
    const a11y = await browser.newPage({ viewport: { width: 1360, height: 1000 }, bypassCSP: true });
    const sizes: Promise<number>[] = [];
    a11y.on("requestfinished", (req) => {
      if (new URL(req.url()).pathname.startsWith("/ui/")) sizes.push(req.sizes().then((z) => z.responseBodySize));
    });
    await a11y.goto(`${server.url}/ui/?id=stu-1`);
    const item = (id: string) => a11y.locator(`[role="treeitem"][data-id="${id}"]`);
    await item("ds-a").locator(":scope > .label .toggle").click();
    await item("pat-1").locator(":scope > .label .toggle").click();
    await item("stu-1").waitFor();
    const bytes = (await Promise.all(sizes)).reduce((a, b) => a + b, 0);
    expect(bytes).toBeGreaterThan(10_000);
    expect(bytes).toBeLessThan(100_000);
    await expect.poll(() => a11y.locator(".detail-panel .history li").count()).toBe(2);
    await a11y.locator("#q-type").selectOption("study");
    await a11y.getByRole("button", { name: "Run query" }).click();
    await expect.poll(() => a11y.locator("#q-count").innerText()).toMatch(/results$/);
    await a11y.getByRole("button", { name: "Start" }).click();
    await expect.poll(() => a11y.locator(".feed-panel .status").innerText()).toMatch(/^Following live/);
    expect(await post("/resources/update", { updates: { "stu-3": { description: "seen live" } } })).toMatchObject({
      status: 200,
    });
    await expect.poll(() => a11y.locator(".feed-panel tbody tr").count()).toBe(1);
    await a11y.locator(".stats-panel table").waitFor();
    const serious = await seriousViolations(a11y);
    expect(serious).toEqual([]);
    // The run can fail: a button with no name is a serious violation it reports.
    const probe = await a11y.evaluate<string[]>(
      "(() => { const b = document.createElement('button'); b.id = 'axe-probe'; document.body.append(b); " +
        "return axe.run('#axe-probe').then((r) => { b.remove(); return r.violations.map((v) => v.id + ':' + v.impact); }); })()",
    );
    expect(probe).toContain("button-name:critical");
    // docs/browsers.md's pictures: the header, then each panel.
    await shoot(a11y.locator("header.top"), "explorer-header.png");
    for (const panel of ["tree", "detail", "stats", "query", "storage", "feed"])
      await shoot(a11y.locator(`.${panel}-panel`), `explorer-${panel}.png`);
    await a11y.getByRole("button", { name: "Stop" }).click();
    await a11y.close();
  });
});

describe("the explorer with authentication on", () => {
  let server: TestServer;
  let uiDir: string;
  let browser: Browser;

  beforeAll(async () => {
    uiDir = await mkdtemp(join(tmpdir(), "rs-ui-"));
    await buildUi(uiDir);
    const tokens =
      "reader-token=read;writer-token=read,write;one-token=read,datasource:ds-one;two-token=read,datasource:ds-two,clearance:public";
    [server, browser] = await Promise.all([startTestServer({ API_TOKENS: tokens }, { uiDir }), launchChromium()]);
    const res = await fetch(`${server.url}/resources/create`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: "Bearer writer-token" },
      body: JSON.stringify({
        resources: [
          { identifier: "ds-auth", payload_type: "datasource", name: "Guarded" },
          { identifier: "ds-one", payload_type: "datasource", name: "One", access_level: "public" },
          { identifier: "ds-two", payload_type: "datasource", name: "Two", access_level: "public" },
          {
            identifier: "pat-one",
            payload_type: "patient",
            parent_identifier: "ds-one",
            datasource_id: "ds-one",
            access_level: "restricted",
          },
          {
            identifier: "pat-two",
            payload_type: "patient",
            parent_identifier: "ds-two",
            datasource_id: "ds-two",
            access_level: "public",
          },
          {
            identifier: "pat-two-internal",
            payload_type: "patient",
            parent_identifier: "ds-two",
            datasource_id: "ds-two",
            access_level: "internal",
          },
          // Public, in ds-two, below a patient the public reader may not see.
          {
            identifier: "stu-under-hidden",
            payload_type: "study",
            parent_identifier: "pat-two-internal",
            access_level: "public",
          },
        ],
      }),
    });
    expect(res.status).toBe(200);
  });
  afterAll(async () => {
    await browser?.close();
    await server?.close();
    if (uiDir !== undefined) await rm(uiDir, { recursive: true, force: true });
  });

  it("loads without a token, asks for one when the API answers 401, and keeps it for the session", async () => {
    const page = await browser.newPage();
    const index = await fetch(server.url + "/ui/");
    expect(index.status).toBe(200);
    await page.goto(server.url + "/ui/");
    const dialog = page.locator("#token-dialog");
    await dialog.waitFor({ state: "visible" });
    await page.locator("#token-input").fill("reader-token");
    await page.screenshot({ path: join(ARTEFACTS, "explorer-token.png") });
    await page.getByRole("button", { name: "Use token" }).click();
    await page.locator('[role="treeitem"][data-id="ds-auth"]').waitFor();
    expect(await page.evaluate('sessionStorage.getItem("resource-store.token")')).toBe("reader-token");
    // A reload asks no more.
    await page.reload();
    await page.locator('[role="treeitem"][data-id="ds-auth"]').waitFor();
    expect(await dialog.isVisible()).toBe(false);
    await page.close();
  });

  it("asks once on a fresh load, checks a token before keeping it, and says who the caller is", async () => {
    const page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
    const refused: string[] = [];
    page.on("response", (r) => {
      if (r.status() === 401) refused.push(new URL(r.url()).pathname);
    });
    await page.goto(server.url + "/ui/");
    const dialog = page.locator("#token-dialog");
    await dialog.waitFor({ state: "visible" });
    // One call is refused before a token is entered (WhoAmI), not one per panel.
    expect(refused).toEqual(["/resourcestore.v2.IdentityService/WhoAmI"]);
    // A wrong token is refused in the dialog and never kept.
    await page.locator("#token-input").fill("not-a-token");
    await page.getByRole("button", { name: "Use token" }).click();
    await expect.poll(() => dialog.locator(".status").innerText()).toMatch(/^That token was refused/);
    expect(await dialog.isVisible()).toBe(true);
    expect(await page.evaluate('sessionStorage.getItem("resource-store.token")')).toBeNull();
    // Cancel, then sign in again from the header.
    await page.getByRole("button", { name: "Cancel" }).click();
    await expect.poll(() => page.locator("#whoami").innerText()).toBe("Not signed in");
    await page.getByRole("button", { name: "Sign in" }).click();
    await dialog.waitFor({ state: "visible" });
    await page.locator("#token-input").fill("two-token");
    await page.getByRole("button", { name: "Use token" }).click();
    // Who it is (WhoAmI), and the way to forget the token, without a reload.
    await expect.poll(() => page.locator("#whoami").innerText()).toBe("token#4 · read · ds-two · up to public");
    expect(await page.getByRole("button", { name: "Forget token" }).isVisible()).toBe(true);
    await page.locator('[role="treeitem"][data-id="ds-two"]').waitFor();
    // A service that cannot be reached is said in words.
    await page.route("**/resourcestore.v2.QueryService/**", (route) => route.abort("connectionrefused"));
    await page.getByRole("button", { name: "Run query" }).click();
    await expect.poll(() => page.locator(".query-panel .status").innerText()).toMatch(/^The service cannot be reached/);
    await page.unrouteAll({ behavior: "ignoreErrors" });
    await shoot(page.locator("header.top"), "explorer-identity.png");
    await page.close();
  });

  it("reaches what the caller may see below a parent it may not, and never links the hidden parent", async () => {
    // bypassCSP: axe is injected (the token dialog and the narrow tree are checked too).
    const page = await browser.newPage({ viewport: { width: 1360, height: 900 }, bypassCSP: true });
    await page.goto(server.url + "/ui/");
    await page.locator("#token-dialog").waitFor({ state: "visible" });
    expect(await seriousViolations(page)).toEqual([]);
    await page.locator("#token-input").fill("two-token");
    await page.getByRole("button", { name: "Use token" }).click();
    const group = page.locator('[role="treeitem"][data-id="(under hidden parents)"]');
    await group.locator(":scope > .label .toggle").click();
    const item = page.locator('[role="treeitem"][data-id="stu-under-hidden"]');
    await item.waitFor();
    expect(await item.innerText()).toContain("pat-two-internal");
    await item.locator(":scope > .label .id").click();
    const fields = page.locator(".detail-panel table.fields");
    await expect.poll(() => fields.innerText()).toMatch(/parent_identifier\s+pat-two-internal \(not visible to you\)/);
    expect(await fields.getByRole("button", { name: "pat-two-internal" }).count()).toBe(0);
    expect(await seriousViolations(page)).toEqual([]);
    await shoot(page.locator(".tree-panel"), "explorer-hidden-parents.png");
    await page.close();
  });

  it("shows each caller only what its grants let it see (two tokens, two tabs)", async () => {
    const open = async (token: string) => {
      const page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
      await page.goto(server.url + "/ui/");
      await page.locator("#token-dialog").waitFor({ state: "visible" });
      await page.locator("#token-input").fill(token);
      await page.getByRole("button", { name: "Use token" }).click();
      return page;
    };
    const item = (page: Page, id: string) => page.locator(`[role="treeitem"][data-id="${id}"]`);
    const one = await open("one-token");
    const two = await open("two-token");
    // Roots: each sees its own datasource only (ds-auth belongs to no patient's datasource but to its own id).
    await item(one, "ds-one").waitFor();
    await item(two, "ds-two").waitFor();
    expect(await item(one, "ds-two").count()).toBe(0);
    expect(await item(two, "ds-one").count()).toBe(0);
    // Counts are of what each may see: ds-two has two patients, the second caller may see one (the other is internal).
    await expect.poll(() => item(two, "ds-two").locator(":scope > .label .count").innerText()).toBe("1 child");
    await expect.poll(() => item(one, "ds-one").locator(":scope > .label .count").innerText()).toBe("1 child");
    // Below: ds-one's restricted patient for the first; only the public patient of ds-two for the second.
    await item(one, "ds-one").locator(":scope > .label .toggle").click();
    await item(one, "pat-one").waitFor();
    await item(two, "ds-two").locator(":scope > .label .toggle").click();
    await item(two, "pat-two").waitFor();
    expect(await item(two, "pat-two-internal").count()).toBe(0);
    // A link to a resource the caller may not see shows it as absent.
    await two.goto(`${server.url}/ui/?id=pat-one`);
    await expect
      .poll(() => two.locator(".detail-panel").innerText())
      .toMatch(/never created, or your grants do not cover it/);
    await one.screenshot({ path: join(ARTEFACTS, "explorer-access-one.png") });
    await two.screenshot({ path: join(ARTEFACTS, "explorer-access-two.png") });
    await Promise.all([one.close(), two.close()]);
  });

  it("follows the change feed with a token, showing only the events of what the caller may see", async () => {
    const page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
    await page.goto(server.url + "/ui/");
    await page.locator("#token-dialog").waitFor({ state: "visible" });
    await page.locator("#token-input").fill("two-token");
    await page.getByRole("button", { name: "Use token" }).click();
    await page.locator('[role="treeitem"][data-id="ds-two"]').waitFor();
    const feed = page.locator(".feed-panel");
    const rows = feed.locator("tbody tr");
    await page.getByRole("button", { name: "Start" }).click();
    await expect.poll(() => feed.locator(".status").innerText()).toMatch(/^Following live since /);
    const write = async (body: unknown) => {
      const res = await fetch(`${server.url}/resources/create`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: "Bearer writer-token" },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(200);
    };
    // One the caller may see (ds-two, public), one it may not (ds-one), then one it may see again.
    await write({
      resources: [
        {
          identifier: "pat-two-live",
          payload_type: "patient",
          parent_identifier: "ds-two",
          datasource_id: "ds-two",
          access_level: "public",
        },
      ],
    });
    await write({
      resources: [
        {
          identifier: "pat-one-live",
          payload_type: "patient",
          parent_identifier: "ds-one",
          datasource_id: "ds-one",
          access_level: "public",
        },
      ],
    });
    await write({
      resources: [
        {
          identifier: "pat-two-live-2",
          payload_type: "patient",
          parent_identifier: "ds-two",
          datasource_id: "ds-two",
          access_level: "public",
        },
      ],
    });
    await expect.poll(() => rows.count()).toBe(2);
    const text = await feed.innerText();
    expect(text).toContain("pat-two-live");
    expect(text).toContain("pat-two-live-2");
    expect(text).not.toContain("pat-one-live");
    await page.getByRole("button", { name: "Stop" }).click();
    await page.close();
  });
});
