// What the dump tests share: embedded stores made from the run's initialised
// PGlite directory (test/support/global-setup.ts, no initdb), a dump taken
// into memory, and a dump's lines as records.
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

/**
 * The lines of a dump's text as objects: the header and the trailer as they
 * are, every record with its section's columns as keys and its record type
 * in `record` (format version 2 writes a record as a list of values after a
 * section line naming the columns; version 1 as such an object already).
 * Section lines are left out.
 */
export function dumpRecords(text: string): Record<string, unknown>[] {
  let section: { records: string; columns: string[] } | undefined;
  const out: Record<string, unknown>[] = [];
  for (const line of text.trimEnd().split("\n")) {
    const parsed = JSON.parse(line) as unknown;
    if (Array.isArray(parsed)) {
      if (section === undefined) throw new Error(`a record before its section: ${line}`);
      const { records, columns } = section;
      out.push(Object.fromEntries([["record", records], ...columns.map((c, i) => [c, parsed[i]] as const)]));
      continue;
    }
    const rec = parsed as Record<string, unknown>;
    if (rec.record === "section") section = { records: rec.records as string, columns: rec.columns as string[] };
    else out.push(rec);
  }
  return out;
}
