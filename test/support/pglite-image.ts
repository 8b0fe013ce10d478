// The run's image of a fresh PGlite data directory (test/support/global-setup.ts),
// for stores in memory: loading it takes a fraction of initdb's seconds.
import { readFile } from "node:fs/promises";
import { inject } from "vitest";
import { openDatabase, type Db } from "../../src/store/index.js";

let image: Promise<Blob> | undefined;

/** A new, unmigrated PGlite store in memory, started from the run's image. */
export function openMemoryStore(): Promise<Db> {
  image ??= readFile(inject("pgliteImage")).then((bytes) => new Blob([bytes]));
  return image.then((embeddedImage) => openDatabase({ embeddedImage }));
}
