// DATA_DIR holds the embedded database (pglite/), the embedded object store
// (s3/) and the generated registry key: patient metadata and the key that
// protects its uids. Nothing under it is for other users of the machine
// (docs/operations.md; under umask 022 PGlite left 969 of 1,036 files 0666).
//
// The process that opens it runs with umask 077 from then on, so every file
// and directory it creates there (PGlite's relation and WAL files, s3rver's
// objects, the key) is 0600/0700 whatever the umask it was started with;
// the process writes nothing else for others (a dump file is created 0600
// on its own). A store made before, or by a process with a wider umask, is
// corrected once at start: every file and directory under DATA_DIR loses
// its group and other bits, and the caller logs how many it changed.
// Symbolic links are left alone (their target is not ours to change).
import { chmod, lstat, readdir } from "node:fs/promises";
import { join } from "node:path";
import { isMainThread } from "node:worker_threads";

/** Group and other permission bits. */
const OTHERS = 0o077;

/** Sets the process's umask to 077 (a worker thread cannot; its files follow the main thread's). */
function ownerOnlyUmask(): void {
  if (isMainThread) process.umask(OTHERS);
}

/**
 * Removes group and other bits from `dir` and everything under it; answers
 * how many entries it changed (0 when `dir` does not exist).
 */
export async function correctModes(dir: string): Promise<number> {
  let changed = 0;
  const visit = async (path: string): Promise<void> => {
    let st;
    try {
      st = await lstat(path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
      throw err;
    }
    if (st.isSymbolicLink()) return;
    if ((st.mode & OTHERS) !== 0) {
      await chmod(path, st.mode & 0o700);
      changed++;
    }
    if (st.isDirectory()) for (const name of await readdir(path)) await visit(join(path, name));
  };
  await visit(dir);
  return changed;
}

/** Both: the umask for what comes, the correction for what is there. Answers how many entries were corrected. */
export async function secureDataDir(dir: string): Promise<number> {
  ownerOnlyUmask();
  return correctModes(dir);
}
