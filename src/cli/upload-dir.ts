// `resource-store upload-dir DIR --group G`: every file under DIR goes to
// object storage through the URLs of PresignUploadDir, several PUTs at once,
// each retried on network errors and 5xx/429. The sha256 and size are
// computed from the very bytes sent (one read per attempt, no second pass),
// and `--create-files PARENT` records each object as a `file` resource.
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { opendir, stat } from "node:fs/promises";
import http from "node:http";
import https from "node:https";
import { extname, join } from "node:path";
import type { ResourceStoreClient } from "../client/index.js";
import { CliError, describeError, warn } from "./common.js";
import type { Progress } from "./progress.js";

export interface UploadOptions {
  readonly group: string;
  readonly concurrency: number;
  readonly createFiles?: string;
  readonly retries: number;
  /** Resources per create call with --create-files. */
  readonly batchSize: number;
}

export interface UploadResult {
  readonly roots: string[];
  readonly uploaded: number;
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

/** At most this many relpaths a PresignUploadDir call (API.md section 11): more files get more roots. */
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

export function contentTypeOf(file: string): string {
  return CONTENT_TYPES[extname(file).toLowerCase()] ?? "application/octet-stream";
}

/** Regular files under `dir`, relpaths with `/`, in byte order. */
export async function walk(dir: string): Promise<LocalFile[]> {
  const out: LocalFile[] = [];
  async function visit(abs: string, rel: string): Promise<void> {
    for await (const entry of await opendir(abs)) {
      const childAbs = join(abs, entry.name);
      const childRel = rel === "" ? entry.name : `${rel}/${entry.name}`;
      if (entry.isDirectory()) await visit(childAbs, childRel);
      else if (entry.isFile()) out.push({ relpath: childRel, absolute: childAbs, size: (await stat(childAbs)).size });
      else if (entry.isSymbolicLink()) {
        const st = await stat(childAbs).catch(() => undefined);
        if (st?.isFile()) out.push({ relpath: childRel, absolute: childAbs, size: st.size });
      }
    }
  }
  await visit(dir, "");
  return out.sort((a, b) => (a.relpath < b.relpath ? -1 : a.relpath > b.relpath ? 1 : 0));
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
function put(url: string, file: LocalFile, contentType: string, agents: { http: http.Agent; https: https.Agent }, onBytes: (n: number) => void): Promise<{ sha256: string; size: number }> {
  return new Promise((resolve, reject) => {
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
        if (sent !== file.size) return done(new CliError(`${file.relpath} changed while it was uploaded (${file.size} bytes listed, ${sent} read)`));
        done(undefined, { sha256: hash.digest("hex"), size: sent });
      });
    });
    const source = createReadStream(file.absolute);
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
export function fileIdentifier(path: string): string {
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
  const files = await walk(dir);
  const totalBytes = files.reduce((s, f) => s + f.size, 0);
  const roots: string[] = [];
  const jobs: { file: LocalFile; url: string; path: string }[] = [];
  for (let i = 0; i < files.length; i += PRESIGN_LIMIT) {
    const chunk = files.slice(i, i + PRESIGN_LIMIT);
    const res = await client.storage.presignUploadDir({ group: opts.group, relpaths: chunk.map((f) => f.relpath) });
    roots.push(res.root);
    onRoot(res.root);
    chunk.forEach((file, k) => {
      const item = res.items[k];
      if (!item?.path) throw new CliError(`the service presigned ${res.items.length} of ${chunk.length} files, or without paths`);
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
          warn(`error: ${job.file.relpath}: ${describeError(err)}${attempt > 0 ? ` (after ${attempt + 1} attempts)` : ""}`);
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
  if (parent !== undefined) {
    const done = results.filter((r): r is Uploaded => r !== undefined);
    for (let i = 0; i < done.length; i += opts.batchSize) {
      const chunk = done.slice(i, i + opts.batchSize);
      try {
        const res = await client.resources.create({
          resources: chunk.map((u) => ({
            identifier: fileIdentifier(u.path),
            parentIdentifier: parent,
            payload: { case: "file" as const, value: { path: u.path, sizeBytes: BigInt(u.size), contentType: u.contentType, sha256: u.sha256 } },
          })),
        });
        created += Number(res.created);
      } catch (err) {
        failed = true;
        warn(`error: creating the file resources ${i + 1}-${i + chunk.length} under ${parent}: ${describeError(err, url)}`);
        break;
      }
    }
  }
  return { roots, uploaded, created, failed };
}
