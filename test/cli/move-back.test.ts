// Moving from PostgreSQL back to an embedded store (
// docs/operations.md "Move"): the dump restores into a new DATA_DIR, and the
// embedded service must be given the registry key the source ran with.
// Without it, start-up stops naming the key id and leaves no generated key
// file behind (it generated one, then refused it for its fingerprint); with
// it, every uid resolves to the identifier it had.
import { access, cp, mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Command } from "commander";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { dumpCommands } from "../../src/cli/dump.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable, REQUIRE_POSTGRES, type TestDatabase } from "../support/postgres.js";
import { TEST_REGISTRY_SECRET } from "../support/registry-key.js";

const pgOk = await postgresReachable();
if (!pgOk && REQUIRE_POSTGRES) throw new Error("PostgreSQL is required (REQUIRE_POSTGRES=1) but not reachable");

async function run(env: Record<string, string>, args: string[]): Promise<{ out: string; err: string }> {
  let out = "";
  let err = "";
  const program = new Command("resource-store").option("-q, --quiet").exitOverride();
  for (const c of dumpCommands({ env, stdout: (t) => (out += t), stderr: (t) => (err += t) })) program.addCommand(c);
  const before = process.exitCode;
  await program.parseAsync(["node", "resource-store", "--quiet", ...args]);
  process.exitCode = before;
  return { out, err };
}

const post = async (url: string, path: string, body: unknown) =>
  (await (
    await fetch(`${url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    })
  ).json()) as { identifier?: string };

describe.skipIf(!pgOk)("moving from PostgreSQL to an embedded store", () => {
  let tdb: TestDatabase;
  let dir: string;
  let patient: string | undefined;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "rs-move-back-"));
    tdb = await createTestDatabase();
    const source: TestServer = await startTestServer({ DATABASE_URL: tdb.url });
    try {
      await post(source.url, "/resources/create", {
        resources: [{ identifier: "mb-ds", payload_type: "datasource", name: "A" }],
      });
      patient = (
        await post(source.url, "/patients/register", { datasource_id: "mb-ds", external_uid: "MRN-move-back" })
      ).identifier;
    } finally {
      await source.close();
    }
    expect(patient).toMatch(/^pat_/);
    const dumped = await run({ DATABASE_URL: tdb.url }, ["dump", "-o", join(dir, "pg.rsdump.gz")]);
    expect(dumped.err).toBe("");
  });
  afterAll(async () => {
    await tdb?.drop();
    await rm(dir, { recursive: true, force: true });
  });

  it("needs the source's key, refuses without it leaving no key file, and resolves every uid with it", async () => {
    const dataDir = join(dir, "data");
    await mkdir(dataDir);
    await cp(inject("pgliteTemplate"), join(dataDir, "pglite"), { recursive: true });
    const restored = await run({ DATA_DIR: dataDir }, ["restore", join(dir, "pg.rsdump.gz")]);
    expect(restored).toEqual({ out: "restored 1 versions\n", err: "" });

    await expect(startTestServer({ DATA_DIR: dataDir })).rejects.toThrow(
      /hashed under key id default .*registry-secret does not exist: give the key/,
    );
    expect(
      await access(join(dataDir, "registry-secret")).then(
        () => true,
        () => false,
      ),
    ).toBe(false);

    const moved = await startTestServer({ DATA_DIR: dataDir, REGISTRY_SECRET: TEST_REGISTRY_SECRET });
    try {
      const resolved = await post(moved.url, "/patients/resolve", {
        datasource_id: "mb-ds",
        external_uid: "MRN-move-back",
      });
      expect(resolved.identifier).toBe(patient);
    } finally {
      await moved.close();
    }
  });
});
