// `resource-store import-dicom DIR --datasource ID`: every DICOM Part 10
// object under DIR (any nesting, any file name) is filed by the filer the
// receiver uses too (src/dicom/filer.ts), through the service's public API.
// The folder is walked twice, never held: once to count (for the ETA), once
// to file, a batch at a time, so memory does not grow with the number of
// files. Reruns are cheap: every identifier is derived from the UIDs, and
// what is already in the store is neither uploaded nor created again.
import { readFileSync } from "node:fs";
import { lstat, opendir, readFile, realpath, stat } from "node:fs/promises";
import { join, sep } from "node:path";
import { DicomReadError, readHeader, type InstanceHeader } from "../dicom/header.js";
import { createFiler, type AccessLevel, type FilerClient, type Instance } from "../dicom/filer.js";
import { CliError, describeError, warn } from "./common.js";
import type { Progress } from "./progress.js";

export interface ImportDicomOptions {
  readonly datasource: string;
  readonly accessLevel: AccessLevel;
  readonly deidentify: boolean;
  readonly deidentifyKeyFile?: string;
  readonly concurrency: number;
  readonly batchSize: number;
  readonly retries: number;
}

export interface ImportDicomResult {
  readonly stored: number;
  readonly present: number;
  readonly skipped: number;
  readonly failed: number;
  readonly bytes: number;
}

/** Batches filed at once (each holds at most `batchSize` small objects). */
const BATCHES_AT_ONCE = 2;

/** Objects up to this size are kept from the header read to the upload; larger ones are read again when sent. */
const KEEP_BYTES = 256 * 1024;

interface Found {
  readonly relpath: string;
  readonly absolute: string;
  readonly size: number;
}

/** Regular files under `dir` in byte order per folder; a symbolic link only when it resolves to a file inside `dir`. */
async function* walkFiles(base: string, onSkipped: (relpath: string, why: string) => void): AsyncGenerator<Found> {
  const inside = (p: string) => p.startsWith(base.endsWith(sep) ? base : base + sep);
  async function* visit(abs: string, rel: string): AsyncGenerator<Found> {
    const names: string[] = [];
    for await (const entry of await opendir(abs)) names.push(entry.name);
    names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    for (const name of names) {
      const childAbs = join(abs, name);
      const childRel = rel === "" ? name : `${rel}/${name}`;
      const st = await lstat(childAbs).catch(() => undefined);
      if (st === undefined) continue;
      if (st.isDirectory()) yield* visit(childAbs, childRel);
      else if (st.isFile()) yield { relpath: childRel, absolute: childAbs, size: st.size };
      else if (st.isSymbolicLink()) {
        const target = await realpath(childAbs).catch(() => undefined);
        const tst = target === undefined ? undefined : await stat(target).catch(() => undefined);
        if (target === undefined || tst === undefined || !inside(target) || !tst.isFile())
          onSkipped(childRel, "a symbolic link that does not lead to a file inside the folder");
        else yield { relpath: childRel, absolute: target, size: tst.size };
      }
    }
  }
  yield* visit(base, "");
}

/** The key that replaces UIDs with --deidentify: --deidentify-key-file, else $DICOM_DEIDENTIFY_KEY. */
function deidentifyKey(file: string | undefined, env: NodeJS.ProcessEnv = process.env): Buffer {
  let text: string | undefined;
  if (file !== undefined) {
    try {
      text = readFileSync(file, "utf8").split(/\r?\n/, 1)[0]?.trim();
    } catch (err) {
      throw new CliError(`--deidentify-key-file ${file}: ${err instanceof Error ? err.message : String(err)}`, 2);
    }
  } else text = env.DICOM_DEIDENTIFY_KEY?.trim();
  if (text === undefined || text.length < 16) {
    throw new CliError(
      "--deidentify needs a key of at least 16 characters (--deidentify-key-file FILE or $DICOM_DEIDENTIFY_KEY): the same key maps the same UIDs to the same replacements",
      2,
    );
  }
  return Buffer.from(text, "utf8");
}

export async function runImportDicom(
  client: FilerClient,
  dir: string,
  opts: ImportDicomOptions,
  progress: Progress,
  url: string,
): Promise<ImportDicomResult> {
  const st = await stat(dir).catch(() => undefined);
  if (!st?.isDirectory()) throw new CliError(`${dir} is not a directory`);
  const key = opts.deidentify ? deidentifyKey(opts.deidentifyKeyFile) : undefined;
  const base = await realpath(dir);
  const filer = createFiler(client, {
    datasource: opts.datasource,
    accessLevel: opts.accessLevel,
    concurrency: opts.concurrency,
    retries: opts.retries,
    ...(key !== undefined ? { deidentifyKey: key } : {}),
  });

  // First pass: how much there is, for the bar and the ETA.
  let totalBytes = 0;
  for await (const f of walkFiles(base, () => {})) totalBytes += f.size;

  let stored = 0;
  let present = 0;
  let skipped = 0;
  let failed = 0;
  let doneBytes = 0;
  let files = 0;
  const tick = () => progress.update({ done: doneBytes, total: totalBytes, rows: files, bytes: doneBytes });

  async function readOne(f: Found): Promise<Instance | undefined> {
    let bytes: Buffer;
    try {
      bytes = await readFile(f.absolute);
    } catch (err) {
      failed++;
      warn(`error: ${f.relpath}: cannot read it: ${err instanceof Error ? err.message : String(err)}`);
      return undefined;
    }
    let header: InstanceHeader;
    try {
      header = readHeader(bytes);
    } catch (err) {
      if (err instanceof DicomReadError && err.kind !== "unreadable") {
        skipped++;
        warn(`skipped ${f.relpath}: ${err.message}`);
      } else {
        failed++;
        warn(`error: ${f.relpath}: ${err instanceof Error ? err.message : String(err)}`);
      }
      doneBytes += f.size;
      files++;
      tick();
      return undefined;
    }
    const kept = bytes.length <= KEEP_BYTES ? bytes : undefined;
    return {
      name: f.relpath,
      header,
      async bytes() {
        const b = kept ?? (await readFile(f.absolute));
        if (b.length !== f.size)
          throw new Error(`changed while it was imported (${f.size} bytes listed, ${b.length} read)`);
        return b;
      },
    };
  }

  async function flush(batch: Found[]): Promise<void> {
    const instances: Instance[] = [];
    let next = 0;
    const read = async () => {
      while (next < batch.length) {
        const i = next++;
        const inst = await readOne(batch[i]!);
        if (inst !== undefined) instances[i] = inst;
      }
    };
    await Promise.all(Array.from({ length: Math.min(opts.concurrency, batch.length) }, read));
    const list = instances.filter((x): x is Instance => x !== undefined);
    if (list.length === 0) return;
    const sizeOf = new Map(batch.map((f) => [f.relpath, f.size]));
    let outcomes;
    try {
      outcomes = await filer.file(list);
    } catch (err) {
      failed += list.length;
      warn(`error: ${list.length} instances from ${list[0]!.name} on were not filed: ${describeError(err, url)}`);
      return;
    }
    outcomes.forEach((o, k) => {
      const name = list[k]!.name;
      if (o.kind === "stored") stored++;
      else if (o.kind === "present") present++;
      else {
        failed++;
        warn(`error: ${name}: ${o.error}`);
      }
      files++;
      doneBytes += sizeOf.get(name) ?? 0;
    });
    tick();
  }

  // Two batches at a time: one's files are read and its round trips made while the other's objects are sent,
  // so the PUTs never wait for a batch's reads, registry look-ups and creates (the `dicom-import` bench line).
  let batch: Found[] = [];
  const inFlight = new Set<Promise<void>>();
  const start = (b: Found[]) => {
    const p: Promise<void> = flush(b).finally(() => inFlight.delete(p));
    inFlight.add(p);
  };
  try {
    for await (const f of walkFiles(base, (relpath, why) => {
      skipped++;
      warn(`skipped ${relpath}: ${why}`);
    })) {
      batch.push(f);
      if (batch.length >= opts.batchSize) {
        if (inFlight.size >= BATCHES_AT_ONCE) await Promise.race(inFlight);
        start(batch);
        batch = [];
      }
    }
    if (batch.length > 0) start(batch);
    await Promise.all(inFlight);
    try {
      await filer.settle();
    } catch (err) {
      failed++;
      warn(`error: updating instance counts and study modalities: ${describeError(err, url)}`);
    }
  } finally {
    filer.close();
  }
  return { stored, present, skipped, failed, bytes: doneBytes };
}
