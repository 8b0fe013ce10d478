// `npm start` builds only when dist/ is older than its sources
// (scripts/build-if-stale.ts): a tree whose build is newer than
// every source is current; a changed source, a missing output, a changed
// build setting or a changed explorer file makes it stale.
import { mkdir, mkdtemp, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { staleBecause } from "../../scripts/build-if-stale.js";

let root: string;

/** Writes `rel` under root with its mtime `at` seconds after the epoch of this test. */
async function file(rel: string, at: number): Promise<void> {
  const p = join(root, rel);
  await mkdir(dirname(p), { recursive: true });
  await writeFile(p, "x");
  const t = new Date(1_700_000_000_000 + at * 1000);
  await utimes(p, t, t);
}

const touch = file;

describe("build-if-stale", () => {
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), "rs-stale-"));
    for (const s of ["tsconfig.json", "tsconfig.build.json", "package.json", "package-lock.json"]) await file(s, 0);
    await file("src/main.ts", 10);
    await file("src/cli/main.ts", 10);
    await file("src/types.d.ts", 50);
    await file("gen/x_pb.ts", 10);
    await file("ui/src/main.ts", 10);
    await file("ui/index.html", 10);
    await file("scripts/build-ui.ts", 0);
    await file("dist/src/main.js", 20);
    await file("dist/src/cli/main.js", 20);
    await file("dist/gen/x_pb.js", 20);
    await file("dist/ui/index.html", 20);
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("finds a build newer than everything current", () => {
    expect(staleBecause(root)).toBeUndefined();
  });

  it("finds a source changed since its build stale", async () => {
    await touch("src/cli/main.ts", 30);
    expect(staleBecause(root)).toMatch(/src\/cli\/main\.ts .*changed/);
  });

  it("finds a source without a build stale", async () => {
    await file("gen/new_pb.ts", 5);
    expect(staleBecause(root)).toMatch(/no build of gen\/new_pb\.ts/);
  });

  it("finds a changed build setting stale", async () => {
    await touch("package-lock.json", 30);
    expect(staleBecause(root)).toMatch(/changed since it was built/);
  });

  it("finds a changed explorer file, or none built, stale", async () => {
    await touch("ui/src/main.ts", 30);
    expect(staleBecause(root)).toMatch(/ui\/src\/main\.ts changed since the explorer was built/);
    await rm(join(root, "dist/ui/index.html"));
    expect(staleBecause(root)).toMatch(/explorer is not built/);
  });
});
