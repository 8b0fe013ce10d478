// `resource-store history ID` and the client's history() (docs/contract/19-audit-history.md):
// every version as NDJSON, oldest first, across pages, then `versions N`.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createResourceStoreClient } from "../../src/client/index.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { buildCli, runCli } from "../cli/run-cli.js";

describe("history in the client and the CLI", () => {
  let srv: TestServer;
  beforeAll(async () => {
    srv = await startTestServer({ API_TOKENS: "tok=read,write,actor:cli-user" });
    const client = createResourceStoreClient({ baseUrl: srv.url, token: "tok" });
    await client.resources.create({
      resources: [{ identifier: "h1", payload: { case: "study", value: { modality: "CT" } } }],
    });
    for (let i = 0; i < 6; i++) await client.resources.update({ updates: { h1: { license: `L${i}` } } });
    await client.resources.delete({ identifiers: ["h1"] });
    await buildCli();
  }, 180_000);
  afterAll(async () => srv?.close());

  it("the client's history() walks every page", async () => {
    const client = createResourceStoreClient({ baseUrl: srv.url, token: "tok" });
    const pages: number[] = [];
    const kinds: string[] = [];
    for await (const page of client.history("h1", { limit: 3 })) {
      pages.push(page.versions.length);
      kinds.push(...page.versions.map((v) => v.kind));
    }
    expect(pages).toEqual([3, 3, 2]);
    expect(kinds).toEqual(["created", ...Array<string>(6).fill("updated"), "deleted"]);
  });

  it("resource-store history prints NDJSON versions on stdout and `versions N` on stderr", async () => {
    const run = await runCli(["--url", srv.url, "--token", "tok", "history", "h1", "--page-size", "2"]);
    expect(run.code, run.stderr).toBe(0);
    // stdout is NDJSON alone (`history ID | jq`); the summary is on stderr.
    const lines = run.stdout.trim().split("\n");
    expect(run.stderr).toMatch(/^(.*\n)*versions 8\n$/);
    const versions = lines.map(
      (l) =>
        JSON.parse(l) as {
          version: number;
          actor: string;
          kind: string;
          resource: { license: string | null; payload_type: string };
        },
    );
    expect(versions.map((v) => v.version)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(versions.every((v) => v.actor === "cli-user" && v.resource.payload_type === "study")).toBe(true);
    expect(versions[6]?.resource.license).toBe("L5");
    // -q: no summary at all.
    const quiet = await runCli(["--url", srv.url, "--token", "tok", "-q", "history", "h1"]);
    expect(quiet.code, quiet.stderr).toBe(0);
    expect(quiet.stderr).not.toMatch(/versions 8/);
    expect(quiet.stdout.trim().split("\n")).toHaveLength(8);
    const missing = await runCli(["--url", srv.url, "--token", "tok", "history", "nope"]);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain("not_found");
  }, 120_000);
});
