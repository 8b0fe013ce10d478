// Once per test run: a PGlite data directory, initialised and cleanly
// closed, and an image of it. Initialising one (initdb in WebAssembly) costs
// seconds, and every wire test's server and every embedded store suite would
// otherwise pay it: servers start from a copy of the directory
// (test/support/app.ts), as a server restarted on an existing DATA_DIR does;
// in-memory stores load the image (test/support/pglite-image.ts). Not
// migrated: each store still runs every migration itself. Removed when the
// run ends.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import type { TestProject } from "vitest/node";
import { openDatabase } from "../../src/store/index.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** A fresh, unmigrated PGlite data directory to copy (never to open in place). */
    pgliteTemplate: string;
    /** The same, as an image file (PGlite's dumpDataDir, a tar) for an in-memory store. */
    pgliteImage: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const root = await mkdtemp(join(tmpdir(), "rs-pglite-template-"));
  const db = await openDatabase({ dataDir: root });
  await db.close();
  const dir = join(root, "pglite");
  const lite = await PGlite.create({ dataDir: dir });
  const image = await lite.dumpDataDir("none");
  await lite.close();
  const imageFile = join(root, "pglite.tar");
  await writeFile(imageFile, new Uint8Array(await image.arrayBuffer()));
  project.provide("pgliteTemplate", dir);
  project.provide("pgliteImage", imageFile);
  return async () => {
    await rm(root, { recursive: true, force: true });
  };
}
