// Once per test run: a PGlite data directory, initialised and cleanly
// closed. Initialising one (initdb in WebAssembly) costs seconds, and every
// wire test's server on the embedded backend would otherwise pay it; they
// start from a copy instead (test/support/app.ts), as a server restarted on
// an existing DATA_DIR does. Not migrated: each server still runs every
// migration itself. Removed when the run ends.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { openDatabase } from "../../src/store/index.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** A fresh, unmigrated PGlite data directory to copy (never to open in place). */
    pgliteTemplate: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const root = await mkdtemp(join(tmpdir(), "rs-pglite-template-"));
  const db = await openDatabase({ dataDir: root });
  await db.close();
  project.provide("pgliteTemplate", join(root, "pglite"));
  return async () => {
    await rm(root, { recursive: true, force: true });
  };
}
