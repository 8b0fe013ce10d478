// `resource-store dump` and `restore` as an operator runs them (docs/dump-format.md):
// from an embedded store (DATA_DIR) to a file, from the file into PostgreSQL
// (DATABASE_URL); the summary lines; an existing file is never overwritten;
// a second restore into the now non-empty store is refused with its reason.
import { cp, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Command } from "commander";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { dumpCommands } from "../../src/cli/dump.js";
import { createResources, deleteResources, migrate, openDatabase, readResources } from "../../src/store/index.js";
import { createTestDatabase, postgresReachable, REQUIRE_POSTGRES, type TestDatabase } from "../support/postgres.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

async function run(env: Record<string, string>, args: string[]): Promise<{ out: string; err: string; code: number }> {
  let out = "";
  let err = "";
  const program = new Command("resource-store").option("-q, --quiet").exitOverride();
  for (const c of dumpCommands({ env, stdout: (t) => (out += t), stderr: (t) => (err += t) })) program.addCommand(c);
  const before = process.exitCode;
  process.exitCode = 0;
  await program.parseAsync(["node", "resource-store", "--quiet", ...args]);
  const code = Number(process.exitCode ?? 0);
  process.exitCode = before;
  return { out, err, code };
}

describe("dump and restore commands", () => {
  let dir: string;
  let pg: TestDatabase | undefined;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "rs-dump-cli-"));
    await cp(inject("pgliteTemplate"), join(dir, "data", "pglite"), { recursive: true });
    const db = await openDatabase({ dataDir: join(dir, "data") });
    await migrate(db);
    await createResources(db, LOCAL_CALLER, [
      { identifier: "cli-root", payloadType: "annotation", payload: { label: "r" } },
      { identifier: "cli-child", payloadType: "annotation", parentIdentifier: "cli-root", payload: { label: "c" } },
    ]);
    await deleteResources(db, LOCAL_CALLER, ["cli-child"], { cascade: true });
    await db.close();
    if (await postgresReachable()) pg = await createTestDatabase();
    else if (REQUIRE_POSTGRES) throw new Error("PostgreSQL is required (REQUIRE_POSTGRES=1) but not reachable");
  });
  afterAll(async () => {
    await pg?.drop();
    await rm(dir, { recursive: true, force: true });
  });

  it("moves an embedded store into PostgreSQL, and refuses what it must", async () => {
    if (pg === undefined) return;
    const file = join(dir, "store.rsdump.gz");
    const dumped = await run({ DATA_DIR: join(dir, "data") }, ["dump", "-o", file]);
    expect(dumped.err).toBe("");
    expect(dumped.out).toMatch(/^dumped 3 versions \(until \d{4}-\d\d-\d\dT[\d:.]+Z\)\n$/);
    expect((await stat(file)).size).toBeGreaterThan(0);

    // Never over an existing file.
    const again = await run({ DATA_DIR: join(dir, "data") }, ["dump", "-o", file]);
    expect(again.code).toBe(1);
    expect(again.err).toMatch(/^error: .*exists: a dump never overwrites a file/);

    const restored = await run({ DATABASE_URL: pg.url }, ["restore", file]);
    expect(restored).toEqual({ out: "restored 3 versions\n", err: "", code: 0 });
    const db = await openDatabase({ databaseUrl: pg.url, poolSize: 1 });
    try {
      const [root, child] = await readResources(db, ALL_GRANTS, ["cli-root", "cli-child"]);
      expect(root).toMatchObject({ identifier: "cli-root", version: 1 });
      expect(child).toBeUndefined(); // tombstoned, as on the source
    } finally {
      await db.close();
    }

    const refused = await run({ DATABASE_URL: pg.url }, ["restore", file]);
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(/^error: the store is not empty/);

    const junk = join(dir, "junk.gz");
    await writeFile(junk, "not gzip");
    const bad = await run({ DATABASE_URL: pg.url }, ["restore", junk]);
    expect(bad.code).toBe(1);
    expect(bad.err).toMatch(/^error: the file is not gzip/);
  });
});
