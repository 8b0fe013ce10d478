// Issue 45, item 6: DICOM in. 10,000 small instances (--quick: 1,000) in
// studies of 100 and series of 50, made from one dcmtk template with the UIDs
// rewritten in place. Two lines, each against a baseline of the same run:
// - import-dicom (the command, as a user runs it) against the bare
//   presign-and-PUT of the same bytes (PresignUploadDir batches and the PUTs,
//   same concurrency, no parsing, registry or resources): target >= 0.7;
// - the receiver (8 storescu associations of one AE title at once, as a PACS
//   sends) against import-dicom of the same instances: target >= 0.7.
// Measured in the order bare, import, receiver, import, bare, so that a
// machine whose speed drifts during the run weighs on both sides of each line.
// The import's peak memory is shown at a tenth of the files and at all of
// them: flat in the number of files.
import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { createResourceStoreClient } from "../src/client/index.js";
import { withDatabase } from "./support/database.js";
import { context, fmt, mb, timed, type Result } from "./support/measure.js";
import { processCpuMs, processMemory, startServer } from "./support/server.js";
import type { BenchOptions } from "./options.js";

export const DICOM_IMPORT_TARGET = 0.7;
export const DICOM_RECEIVER_TARGET = 0.7;
const BIN = fileURLToPath(new URL("../bin/resource-store.js", import.meta.url));
const exec = promisify(execFile);
const CONCURRENCY = 8;
const ASSOCIATIONS = 8;

const TEMPLATE = [
  "(0002,0002) UI =CTImageStorage",
  "(0002,0003) UI 1.2.826.0.1.3680043.8.498.3.999999999",
  "(0008,0016) UI =CTImageStorage",
  "(0008,0018) UI 1.2.826.0.1.3680043.8.498.3.999999999",
  "(0008,0020) DA [20240314]",
  "(0008,0060) CS [CT]",
  "(0010,0010) PN [BENCH^PATIENT]",
  "(0010,0020) LO [PID-99999]",
  "(0010,0030) DA [19700101]",
  "(0010,0040) CS [M]",
  "(0020,000d) UI 1.2.826.0.1.3680043.8.498.1.999999",
  "(0020,000e) UI 1.2.826.0.1.3680043.8.498.2.9999999",
  "(0020,0011) IS [1]",
  "(0028,0002) US 1",
  "(0028,0004) CS [MONOCHROME2]",
  "(0028,0010) US 16",
  "(0028,0011) US 16",
  "(0028,0100) US 16",
  "(0028,0101) US 12",
  "(0028,0102) US 11",
  "(0028,0103) US 0",
  `(7fe0,0010) OW ${Array.from({ length: 256 }, (_, i) => (i * 7).toString(16).padStart(4, "0")).join("\\")}`,
].join("\n");

function replaceAll(bytes: Buffer, from: string, to: string): void {
  const needle = Buffer.from(from, "latin1");
  const value = Buffer.from(to, "latin1");
  for (let at = bytes.indexOf(needle); at !== -1; at = bytes.indexOf(needle, at + needle.length)) value.copy(bytes, at);
}

/** `count` instances under dir/part-<k>/ (one folder per association), UIDs and the PatientID rewritten in place (same lengths). */
async function makeInstances(dir: string, count: number): Promise<number> {
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "template.txt"), `${TEMPLATE}\n`);
  await exec("dump2dcm", ["-q", "+te", join(dir, "template.txt"), join(dir, "template.dcm")]);
  const template = await readFile(join(dir, "template.dcm"));
  let bytes = 0;
  for (let k = 0; k < ASSOCIATIONS; k++) await mkdir(join(dir, `part-${k}`));
  for (let i = 0; i < count; i++) {
    const study = Math.floor(i / 100);
    const series = Math.floor(i / 50);
    const b = Buffer.from(template);
    replaceAll(b, "999999999", String(i).padStart(9, "0"));
    replaceAll(b, "2.9999999", `2.${String(series).padStart(7, "0")}`);
    replaceAll(b, "1.999999", `1.${String(study).padStart(6, "0")}`);
    replaceAll(b, "PID-99999", `PID-${String(study % 20).padStart(5, "0")}`);
    // A study's instances go to one association, as a modality sends them.
    await writeFile(join(dir, `part-${study % ASSOCIATIONS}`, `i${i}.dcm`), b);
    bytes += b.length;
  }
  await rm(join(dir, "template.dcm"));
  await rm(join(dir, "template.txt"));
  return bytes;
}

async function files(dir: string): Promise<string[]> {
  return (await readdir(dir, { recursive: true })).filter((f) => f.endsWith(".dcm")).sort();
}

/** The baseline: the same bytes through PresignUploadDir and PUT, nothing else. */
async function bareUpload(url: string, dir: string, group: string): Promise<number> {
  const client = createResourceStoreClient({ baseUrl: url, transport: "grpc" });
  const rels = await files(dir);
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const { seconds } = await timed(async () => {
    let root: string | undefined;
    for (let i = 0; i < rels.length; i += 500) {
      const chunk = rels.slice(i, i + 500);
      const bodies = await Promise.all(chunk.map((r) => readFile(join(dir, r))));
      const res = await client.storage.presignUploadDir({
        group,
        relpaths: chunk,
        ...(root !== undefined ? { root } : {}),
      });
      root = res.root;
      let next = 0;
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next < chunk.length) {
            const k = next++;
            const body = bodies[k]!;
            createHash("sha256").update(body).digest("hex");
            await new Promise<void>((resolve, reject) => {
              const req = http.request(
                res.items[k]!.url,
                {
                  method: "PUT",
                  agent,
                  headers: { "content-length": String(body.length), "content-type": "application/dicom" },
                },
                (r) => {
                  r.resume();
                  r.on("end", () =>
                    (r.statusCode ?? 0) < 300 ? resolve() : reject(new Error(`PUT answered ${r.statusCode}`)),
                  );
                },
              );
              req.on("error", reject);
              req.end(body);
            });
          }
        }),
      );
    }
  });
  agent.destroy();
  return seconds;
}

async function importDicom(
  url: string,
  dir: string,
  datasource: string,
): Promise<{ seconds: number; peak: number; stdout: string }> {
  let peak = 0;
  const { value, seconds } = await timed(
    () =>
      new Promise<string>((resolve, reject) => {
        const child = spawn(
          process.execPath,
          [
            BIN,
            "--quiet",
            "--url",
            url,
            "import-dicom",
            dir,
            "--datasource",
            datasource,
            "--concurrency",
            String(CONCURRENCY),
          ],
          { stdio: ["ignore", "pipe", "pipe"] },
        );
        let stdout = "";
        let stderr = "";
        child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
        child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
        const poll = setInterval(() => {
          processMemory(child.pid!).then(
            (m) => (peak = Math.max(peak, m.peak)),
            () => {},
          );
        }, 200);
        child.once("exit", (code) => {
          clearInterval(poll);
          if (code === 0) resolve(stdout);
          else reject(new Error(`import-dicom exited ${String(code)}: ${stderr.slice(-2000)}`));
        });
      }),
  );
  return { seconds, peak, stdout: value };
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

async function sendWithStorescu(port: number, dir: string): Promise<number> {
  const { seconds } = await timed(() =>
    Promise.all(
      Array.from({ length: ASSOCIATIONS }, (_, k) =>
        exec(
          "storescu",
          ["-aet", "BENCHPACS", "-aec", "RESOURCESTORE", "+sd", "127.0.0.1", String(port), join(dir, `part-${k}`)],
          // dcmtk leaves Nagle's algorithm on unless TCP_NODELAY=1: each C-STORE would then wait ~40 ms for the
          // receiver's delayed ACK, whoever the receiver is (docs/dicom.md, "The receiver").
          { maxBuffer: 64 * 1024 * 1024, env: { ...process.env, TCP_NODELAY: "1" } },
        ),
      ),
    ),
  );
  return seconds;
}

export async function dicomBenchmarks(opts: BenchOptions): Promise<Result[]> {
  const count = opts.quick ? 1_000 : 10_000;
  const work = await mkdtemp(join(tmpdir(), "rs-bench-dicom-"));
  try {
    const bytes = await makeInstances(join(work, "all"), count);
    await makeInstances(join(work, "tenth"), count / 10);
    context(
      `DICOM in: ${fmt(count)} instances of ${fmt(bytes / count)} bytes (${mb(bytes)}), 100 a study, 50 a series; ${CONCURRENCY} PUTs at once; the receiver fed by ${ASSOCIATIONS} storescu associations`,
    );
    return await withDatabase(async (db) => {
      const dicomPort = await freePort();
      const server = await startServer({
        databaseUrl: db.url,
        env: { DICOM_PORT: String(dicomPort), DICOM_DATASOURCE: "ds-received", LOG_LEVEL: "info" },
      });
      try {
        // In the order bare, import, receiver, import, bare: each line's two sides are measured on both sides
        // of the middle, so a machine that slows down or speeds up during the run (shared CI cores) weighs on
        // both alike; a side measured twice counts by its mean.
        const all = join(work, "all");
        const tenth = await importDicom(server.url, join(work, "tenth"), "ds-tenth");
        const bare1 = await bareUpload(server.url, all, "bare-1");
        // The service's CPU per instance in each: the receiver does in the service's process what import-dicom
        // does in a process of its own (DIMSE, headers, spool, the filer's client half).
        const cpu0 = await processCpuMs(server.pid);
        const imported1 = await importDicom(server.url, all, "ds-import-1");
        const cpu1 = await processCpuMs(server.pid);
        const received = await sendWithStorescu(dicomPort, all);
        const cpu2 = await processCpuMs(server.pid);
        const imported2 = await importDicom(server.url, all, "ds-import-2");
        const bare2 = await bareUpload(server.url, all, "bare-2");
        for (const run of [imported1, imported2])
          if (!run.stdout.startsWith(`imported ${count} dicom instances, 0 already there`))
            throw new Error(`import-dicom said ${JSON.stringify(run.stdout)}`);
        // The receiver filed everything: a rerun of the import into its datasource finds every instance there.
        const check = await importDicom(server.url, all, "ds-received");
        if (!check.stdout.startsWith(`imported 0 dicom instances, ${count} already there`))
          throw new Error(`after the receiver, import-dicom said ${JSON.stringify(check.stdout)}`);
        const bare = (bare1 + bare2) / 2;
        const imported = (imported1.seconds + imported2.seconds) / 2;
        const s = (x: number) => `${fmt(x, 1)} s`;
        context(`bare presign + PUT: ${fmt(count / bare)} instances/s (${s(bare1)}, ${s(bare2)})`);
        context(
          `import-dicom: ${fmt(count / imported)} instances/s (${s(imported1.seconds)}, ${s(imported2.seconds)}); command peak RSS ${mb(tenth.peak)} at ${fmt(count / 10)} files, ${mb(Math.max(imported1.peak, imported2.peak))} at ${fmt(count)}`,
        );
        context(`receiver (storescu x${ASSOCIATIONS}): ${fmt(count / received)} instances/s (${s(received)})`);
        context(
          `service CPU per instance: import-dicom ${fmt((cpu1 - cpu0) / count, 2)} ms, receiver ${fmt((cpu2 - cpu1) / count, 2)} ms`,
        );
        return [
          { name: "dicom-import", ratio: bare / imported, op: ">=", target: DICOM_IMPORT_TARGET },
          { name: "dicom-receiver", ratio: imported / received, op: ">=", target: DICOM_RECEIVER_TARGET },
        ];
      } finally {
        await server.close();
      }
    });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
