// `resource-store upload-dir DIR --group G`: every file under DIR goes to
// object storage through the URLs of PresignUploadDir, several PUTs at once,
// each retried on network errors and 5xx/429. The sha256 and size are
// computed from the very bytes sent (one read per attempt, no second pass),
// and `--create-files PARENT` records each object as a `file` resource.
//
// Symbolic links: a link is uploaded (with the bytes of its target) only when
// it resolves to a regular file inside DIR; a link that leads out of DIR, to
// a directory, or nowhere is skipped and named on stderr. A link out of DIR
// would publish whatever it points at (~/.aws/credentials), and a link to a
// directory could loop.
//
// `--root s3://bucket/{group}/{id}/` uploads into a root answered by an
// earlier run: the objects already there with the size of the local file are
// left as they are, so a rerun sends only what is missing.
import { createHash } from "node:crypto";
import { constants as fsConstants, createReadStream, openSync } from "node:fs";
import { opendir, realpath, stat } from "node:fs/promises";
import http from "node:http";
import https from "node:https";
import { extname, join, sep } from "node:path";
import type { ResourceStoreClient } from "../client/index.js";
import { activeAmong, CliError, describeError, warn } from "./common.js";
import type { Progress } from "./progress.js";

export interface UploadOptions {
  readonly group: string;
  readonly concurrency: number;
  readonly createFiles?: string;
  readonly retries: number;
  /** Resources per create call with --create-files. */
  readonly batchSize: number;
  /** A root of an earlier run to complete, `s3://bucket/{group}/{id}/`. */
  readonly root?: string;
}

export interface UploadResult {
  readonly roots: string[];
  readonly uploaded: number;
  /** Files left out: already in the root (--root) with the same size. */
  readonly present: number;
  /** Symbolic links not followed, relpaths. */
  readonly skippedLinks: string[];
  readonly created: number;
  readonly failed: boolean;
}

interface LocalFile {
  readonly relpath: string;
  readonly absolute: string;
  readonly size: number;
}

interface Uploaded {
  readonly path: string;
  readonly size: number;
  readonly sha256: string;
  readonly contentType: string;
}

/** At most this many relpaths a PresignUploadDir call (docs/contract/11-errors.md): more files take more calls, into the same root. */
const PRESIGN_LIMIT = 10_000;

const CONTENT_TYPES: Record<string, string> = {
  ".dcm": "application/dicom",
  ".dicom": "application/dicom",
  ".nii": "application/octet-stream",
  ".gz": "application/gzip",
  ".zip": "application/zip",
  ".json": "application/json",
  ".ndjson": "application/x-ndjson",
  ".parquet": "application/vnd.apache.parquet",
  ".csv": "text/csv",
  ".tsv": "text/tab-separated-values",
  ".txt": "text/plain",
  ".md": "text/markdown",
  ".html": "text/html",
  ".xml": "application/xml",
  ".yaml": "application/yaml",
  ".yml": "application/yaml",
  ".pdf": "application/pdf",
  ".png": "image/png",
  ".jpg": "image/jpeg",
  ".jpeg": "image/jpeg",
  ".tif": "image/tiff",
  ".tiff": "image/tiff",
  ".svg": "image/svg+xml",
  ".onnx": "application/octet-stream",
};

function contentTypeOf(file: string): string {
  return CONTENT_TYPES[extname(file).toLowerCase()] ?? "application/octet-stream";
}

interface Walked {
  readonly files: LocalFile[];
  /** Links not followed, with why. */
  readonly skipped: { relpath: string; why: string }[];
}

/**
 * Regular files under `dir`, relpaths with `/`, in byte order. Directories
 * are entered only as themselves, never through a link; a link counts as a
 * file only when its target, resolved, is a regular file inside `dir`, and it
 * is then read through that resolved path.
 */
async function walk(dir: string): Promise<Walked> {
  const base = await realpath(dir);
  const inside = (p: string) => p.startsWith(base.endsWith(sep) ? base : base + sep);
  const files: LocalFile[] = [];
  const skipped: { relpath: string; why: string }[] = [];
  async function visit(abs: string, rel: string): Promise<void> {
    for await (const entry of await opendir(abs)) {
      const childAbs = join(abs, entry.name);
      const childRel = rel === "" ? entry.name : `${rel}/${entry.name}`;
      if (entry.isDirectory()) await visit(childAbs, childRel);
      else if (entry.isFile()) files.push({ relpath: childRel, absolute: childAbs, size: (await stat(childAbs)).size });
      else if (entry.isSymbolicLink()) {
        const target = await realpath(childAbs).catch(() => undefined);
        const st = target === undefined ? undefined : await stat(target).catch(() => undefined);
        if (target === undefined || st === undefined)
          skipped.push({ relpath: childRel, why: "its target does not exist" });
        else if (!inside(target)) skipped.push({ relpath: childRel, why: "it points outside the directory" });
        else if (!st.isFile()) skipped.push({ relpath: childRel, why: "it does not point to a regular file" });
        else files.push({ relpath: childRel, absolute: target, size: st.size });
      }
    }
  }
  await visit(base, "");
  const byBytes = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  files.sort((a, b) => byBytes(a.relpath, b.relpath));
  skipped.sort((a, b) => byBytes(a.relpath, b.relpath));
  return { files, skipped };
}

/**
 * Opens a walked file without following a link in its last component: a
 * file swapped for a link after the walk is refused, not read. (`absolute`
 * is the resolved path for an accepted link, so no link is expected there.)
 */
const READ_NO_FOLLOW = fsConstants.O_RDONLY | (fsConstants.O_NOFOLLOW ?? 0);

/** The sha256 of a file already in object storage, from the local copy (same size: taken as the same file). */
function hashFile(path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const hash = createHash("sha256");
    createReadStream(path, { fd: openSync(path, READ_NO_FOLLOW) })
      .on("data", (chunk) => hash.update(chunk as Buffer))
      .on("error", reject)
      .on("end", () => resolve(hash.digest("hex")));
  });
}

/** `s3://bucket/{group}/{id}/` as given to --root: checked here for a clear message, and again by the service. */
function checkRoot(root: string, group: string): void {
  const m = /^s3:\/\/[^/]+\/(.+)$/.exec(root);
  if (m === null || !root.endsWith("/"))
    throw new CliError(`--root ${root}: expected s3://bucket/{group}/{id}/ as printed by an earlier upload-dir`, 2);
  if (!m[1]!.startsWith(`${group}/`) || m[1] === `${group}/`)
    throw new CliError(`--root ${root} does not lie under --group ${group}`, 2);
}

class HttpStatusError extends Error {
  constructor(
    readonly status: number,
    body: string,
  ) {
    super(`storage answered ${status}${body !== "" ? `: ${body.slice(0, 300)}` : ""}`);
  }
}

function retriable(err: unknown): boolean {
  if (err instanceof HttpStatusError) return err.status >= 500 || err.status === 429 || err.status === 408;
  return !(err instanceof CliError);
}

/** One PUT of the file, hashing and counting the bytes as they are sent. */
function put(
  url: string,
  file: LocalFile,
  contentType: string,
  agents: { http: http.Agent; https: https.Agent },
  onBytes: (n: number) => void,
): Promise<{ sha256: string; size: number }> {
  return new Promise((resolve, reject) => {
    let fd: number;
    try {
      fd = openSync(file.absolute, READ_NO_FOLLOW);
    } catch (err) {
      // Not a network failure: sending again would meet the same file.
      reject(new CliError(`cannot read it: ${err instanceof Error ? err.message : String(err)}`));
      return;
    }
    const target = new URL(url);
    const mod = target.protocol === "https:" ? https : http;
    const hash = createHash("sha256");
    let sent = 0;
    let settled = false;
    const done = (err: Error | undefined, value?: { sha256: string; size: number }) => {
      if (settled) return;
      settled = true;
      if (err) reject(err);
      else resolve(value!);
    };
    const req = mod.request(target, {
      method: "PUT",
      agent: target.protocol === "https:" ? agents.https : agents.http,
      headers: { "content-length": String(file.size), "content-type": contentType },
    });
    req.on("error", (err) => done(err));
    req.on("response", (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => {
        if (body.length < 1000) body += d;
      });
      res.on("error", (err) => done(err));
      res.on("end", () => {
        const status = res.statusCode ?? 0;
        if (status < 200 || status >= 300) return done(new HttpStatusError(status, body));
        if (sent !== file.size)
          return done(
            new CliError(`${file.relpath} changed while it was uploaded (${file.size} bytes listed, ${sent} read)`),
          );
        done(undefined, { sha256: hash.digest("hex"), size: sent });
      });
    });
    const source = createReadStream(file.absolute, { fd });
    source.on("data", (chunk) => {
      const b = chunk as Buffer;
      hash.update(b);
      sent += b.length;
      onBytes(b.length);
    });
    source.on("error", (err) => {
      req.destroy(err);
      done(err);
    });
    source.pipe(req);
  });
}

/** The identifier of the `file` resource of an uploaded object: stable for its path. */
function fileIdentifier(path: string): string {
  return `file-${createHash("sha256").update(path).digest("hex").slice(0, 40)}`;
}

export async function runUploadDir(
  client: ResourceStoreClient,
  dir: string,
  opts: UploadOptions,
  progress: Progress,
  url: string,
  onRoot: (root: string) => void,
): Promise<UploadResult> {
  const st = await stat(dir).catch(() => undefined);
  if (!st?.isDirectory()) throw new CliError(`${dir} is not a directory`);
  if (opts.root !== undefined) checkRoot(opts.root, opts.group);
  const walked = await walk(dir);
  for (const s of walked.skipped) warn(`skipped ${s.relpath}: a symbolic link, and ${s.why}`);

  // With --root: what the root already holds, by relpath, with its size.
  const existing = new Map<string, number>();
  if (opts.root !== undefined) {
    try {
      const listed = await client.storage.list({ prefix: opts.root });
      const rootKey = opts.root.slice(opts.root.indexOf("/", "s3://".length) + 1);
      listed.keys.forEach((key, i) => {
        const size = listed.sizes[i];
        if (key.startsWith(rootKey) && size !== undefined) existing.set(key.slice(rootKey.length), Number(size));
      });
    } catch (err) {
      // Not allowed to list (section 18) or too many keys: every file is sent again, which is correct, only slower.
      warn(`cannot list ${opts.root} (${describeError(err, url)}); uploading every file again`);
    }
  }
  const already = walked.files.filter((f) => existing.get(f.relpath) === f.size);
  const files = walked.files.filter((f) => existing.get(f.relpath) !== f.size);
  if (already.length > 0) warn(`${already.length} files already in ${opts.root}, with the same size: not sent again`);

  const totalBytes = files.reduce((s, f) => s + f.size, 0);
  // One root for the whole directory: the first call makes it (unless --root gives it), later calls reuse it.
  let root = opts.root;
  if (root !== undefined) onRoot(root);
  const jobs: { file: LocalFile; url: string; path: string }[] = [];
  for (let i = 0; i < files.length; i += PRESIGN_LIMIT) {
    const chunk = files.slice(i, i + PRESIGN_LIMIT);
    const res = await client.storage.presignUploadDir({
      group: opts.group,
      relpaths: chunk.map((f) => f.relpath),
      ...(root !== undefined ? { root } : {}),
    });
    if (root === undefined) {
      root = res.root;
      onRoot(root);
    } else if (res.root !== root) {
      throw new CliError(
        `the service answered root ${res.root} instead of ${root}: it does not know --root (a service older than this command)`,
      );
    }
    chunk.forEach((file, k) => {
      const item = res.items[k];
      if (!item?.path)
        throw new CliError(`the service presigned ${res.items.length} of ${chunk.length} files, or without paths`);
      jobs.push({ file, url: item.url, path: item.path });
    });
  }

  const agents = {
    http: new http.Agent({ keepAlive: true, maxSockets: opts.concurrency }),
    https: new https.Agent({ keepAlive: true, maxSockets: opts.concurrency }),
  };
  const results: (Uploaded | undefined)[] = new Array<Uploaded | undefined>(jobs.length);
  let bytes = 0;
  let uploaded = 0;
  let failed = false;
  const tick = () => progress.update({ done: bytes, total: totalBytes, rows: uploaded, bytes });
  let next = 0;
  async function worker(): Promise<void> {
    while (next < jobs.length) {
      const index = next++;
      const job = jobs[index]!;
      const contentType = contentTypeOf(job.file.relpath);
      for (let attempt = 0; ; attempt++) {
        let counted = 0;
        try {
          const r = await put(job.url, job.file, contentType, agents, (n) => {
            counted += n;
            bytes += n;
            tick();
          });
          results[index] = { path: job.path, size: r.size, sha256: r.sha256, contentType };
          uploaded++;
          tick();
          break;
        } catch (err) {
          bytes -= counted;
          if (attempt < opts.retries && retriable(err)) {
            await new Promise((r) => setTimeout(r, Math.min(8000, 250 * 2 ** attempt)));
            continue;
          }
          failed = true;
          warn(
            `error: ${job.file.relpath}: ${describeError(err)}${attempt > 0 ? ` (after ${attempt + 1} attempts)` : ""}`,
          );
          break;
        }
      }
    }
  }
  try {
    await Promise.all(Array.from({ length: Math.min(opts.concurrency, Math.max(1, jobs.length)) }, () => worker()));
  } finally {
    agents.http.destroy();
    agents.https.destroy();
  }

  let created = 0;
  const parent = opts.createFiles;
  if (parent !== undefined && root !== undefined) {
    let done = results.filter((r): r is Uploaded => r !== undefined);
    for (const f of already) {
      try {
        done.push({
          path: `${root}${f.relpath}`,
          size: f.size,
          sha256: await hashFile(f.absolute),
          contentType: contentTypeOf(f.relpath),
        });
      } catch (err) {
        failed = true;
        warn(`error: ${f.relpath}: ${describeError(err)}`);
      }
    }
    // On a rerun some file resources exist already: create only the others.
    if (opts.root !== undefined && done.length > 0) {
      try {
        const active = await activeAmong(
          client,
          done.map((u) => fileIdentifier(u.path)),
        );
        done = done.filter((u) => !active.has(fileIdentifier(u.path)));
      } catch (err) {
        failed = true;
        warn(`error: looking up the file resources already under ${parent}: ${describeError(err, url)}`);
        done = [];
      }
    }
    done.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    for (let i = 0; i < done.length; i += opts.batchSize) {
      const chunk = done.slice(i, i + opts.batchSize);
      try {
        const res = await client.resources.create({
          resources: chunk.map((u) => ({
            identifier: fileIdentifier(u.path),
            parentIdentifier: parent,
            payload: {
              case: "file" as const,
              value: { path: u.path, sizeBytes: BigInt(u.size), contentType: u.contentType, sha256: u.sha256 },
            },
          })),
        });
        created += Number(res.created);
      } catch (err) {
        failed = true;
        warn(
          `error: creating the file resources ${i + 1}-${i + chunk.length} under ${parent}: ${describeError(err, url)}`,
        );
        break;
      }
    }
  }
  return {
    roots: root !== undefined ? [root] : [],
    uploaded,
    present: already.length,
    skippedLinks: walked.skipped.map((s) => s.relpath),
    created,
    failed,
  };
}
