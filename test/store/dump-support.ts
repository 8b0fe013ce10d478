// What the dump tests share: embedded stores made from the run's initialised
// PGlite directory (test/support/global-setup.ts, no initdb), and a dump
// taken into memory.
import { cp, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { inject } from "vitest";
import { migrate, openDatabase, writeDump, type Db } from "../../src/store/index.js";

/** Fresh migrated embedded stores, each in a folder of its own; removeAll() deletes the folders (close the stores first). */
export function pgliteStores(prefix: string): { open: () => Promise<Db>; removeAll: () => Promise<void> } {
  const dirs: string[] = [];
  return {
    open: async () => {
      const dir = await mkdtemp(join(tmpdir(), prefix));
      dirs.push(dir);
      await cp(inject("pgliteTemplate"), join(dir, "pglite"), { recursive: true });
      const db = await openDatabase({ dataDir: dir });
      await migrate(db);
      return db;
    },
    removeAll: async () => {
      for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
    },
  };
}

/** The dump of `db` as bytes. */
export async function dumpToBuffer(db: Db, options: Parameters<typeof writeDump>[2]): Promise<Buffer> {
  const sink = new PassThrough();
  const chunks: Buffer[] = [];
  sink.on("data", (c: Buffer) => chunks.push(c));
  await writeDump(db, sink, options);
  return Buffer.concat(chunks);
}
