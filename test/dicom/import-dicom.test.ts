// `resource-store import-dicom` on real files made by dcmtk in the
// test: the tree and its payloads, skipped and refused files named, reruns
// and resumed runs that create and upload nothing twice, access levels, and
// a scan of everything stored for the identifiers planted in the files.
import { createHash } from "node:crypto";
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { replacementUid } from "../../src/dicom/deidentify.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { buildCli, runCli } from "../cli/run-cli.js";
import { hasDcmtk, makeDicomFolder, PLANTED, UIDS, type Made } from "./fixtures.js";
import { API_TOKENS, caller, dcmdump, download, everything, TOKENS, type Flat } from "./support.js";

let work: string;
let made: Made;
let server: TestServer;
const url = () => server.url;
const admin = caller(url, TOKENS.admin);
const importDicom = (args: string[], env: Record<string, string> = {}) =>
  runCli(["--url", url(), "import-dicom", ...args], { env: { RESOURCE_STORE_TOKEN: TOKENS.importer, ...env } });

beforeAll(async () => {
  if (!(await hasDcmtk())) throw new Error("these tests make their DICOM files with dcmtk: apt-get install -y dcmtk");
  work = await mkdtemp(join(tmpdir(), "rs-dicom-"));
  [made] = await Promise.all([makeDicomFolder(work), buildCli()]);
  server = await startTestServer({ API_TOKENS });
});

afterAll(async () => {
  await server?.close();
  await rm(work, { recursive: true, force: true });
});

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const ofDatasource = (all: Flat[], ds: string): Flat[] => {
  const inside = new Set(
    all.filter((r) => r.payload_type === "patient" && r.datasource_id === ds).map((r) => r.identifier),
  );
  let grew = true;
  while (grew) {
    grew = false;
    for (const r of all)
      if (r.parent_identifier !== null && inside.has(r.parent_identifier) && !inside.has(r.identifier)) {
        inside.add(r.identifier);
        grew = true;
      }
  }
  return all.filter((r) => inside.has(r.identifier));
};

describe("import-dicom", () => {
  it("files a folder: patients, studies, series and files from the headers; refused files named after the rest is in; a rerun does nothing; an interrupted run completes", async () => {
    // An interrupted run: only part of the folder got in.
    const partial = join(work, "partial");
    await mkdir(join(partial, "ct"), { recursive: true });
    await cp(join(made.dir, "ct/IM1.dcm"), join(partial, "ct/IM1.dcm"));
    const first = await importDicom([partial, "--datasource", "ds-a"]);
    expect(first.stdout.trim()).toBe("imported 1 dicom instances, 0 already there, 0 skipped, 0 failed");
    expect(first.code).toBe(0);

    // The same command on the whole folder completes it.
    const run = await importDicom([made.dir, "--datasource", "ds-a", "--concurrency", "3", "--batch-size", "4"]);
    expect(run.stdout.trim()).toBe(
      `imported ${made.good.length - 1} dicom instances, 1 already there, 2 skipped, 1 failed`,
    );
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`error: ${made.truncated}: unreadable DICOM`);
    expect(run.stderr).toContain(`skipped ${made.notDicom}: not a DICOM Part 10 file`);
    expect(run.stderr).toContain(`skipped ${made.dicomdir}: a DICOMDIR`);
    for (const good of made.good) expect(run.stderr).not.toContain(good);

    const tree = ofDatasource(await everything(admin), "ds-a");
    const by = (t: string) => tree.filter((r) => r.payload_type === t);
    // The CT/MR patient, the multi-frame patient, one patient for the study without PatientID.
    expect(by("patient")).toHaveLength(3);
    for (const p of by("patient"))
      expect(p).toMatchObject({
        datasource_id: "ds-a",
        sex: "female",
        birth_year: 1965,
        access_level: "internal",
        parent_identifier: null,
      });
    expect(by("study")).toHaveLength(3);
    const ctStudy = by("study").find((s) => s.modality === "CT\\MR")!;
    expect(ctStudy).toMatchObject({ study_date: "2024-03-14", description: "Thorax routine", body_part: "CHEST" });
    expect(ctStudy.accession_number).toBeUndefined();
    const series = by("series")
      .map((s) => [s.modality, s.series_number, s.instance_count, s.description])
      .sort();
    expect(series).toEqual([
      ["CT", 1, 3, "CT series 1"],
      ["CT", 3, 1, "CT series 3"],
      ["MR", 2, 2, "MR series 2"],
      ["OT", 7, 1, "OT series 7"],
    ]);
    expect(by("series").filter((s) => s.parent_identifier === ctStudy.identifier)).toHaveLength(2);
    // Files: the objects as they were on disk.
    const files = by("file");
    expect(files).toHaveLength(made.good.length);
    const local = new Map(
      await Promise.all(made.good.map(async (rel) => [sha(await readFile(join(made.dir, rel))), rel] as const)),
    );
    for (const f of files) {
      expect(f.content_type).toBe("application/dicom");
      const bytes = await download(admin, f.path as string);
      expect(sha(bytes)).toBe(f.sha256);
      expect(Number(f.size_bytes)).toBe(bytes.length);
      expect(local.has(f.sha256 as string)).toBe(true);
    }

    // A rerun: nothing created, uploaded or changed.
    const before = JSON.stringify(tree);
    const keysBefore = (await admin("GET", `/s3/list?prefix=${encodeURIComponent("s3://resources/dicom/ds-a/")}`)).json;
    const again = await importDicom([made.dir, "--datasource", "ds-a"]);
    expect(again.stdout.trim()).toBe(
      `imported 0 dicom instances, ${made.good.length} already there, 2 skipped, 1 failed`,
    );
    expect(JSON.stringify(ofDatasource(await everything(admin), "ds-a"))).toBe(before);
    expect((await admin("GET", `/s3/list?prefix=${encodeURIComponent("s3://resources/dicom/ds-a/")}`)).json).toEqual(
      keysBefore,
    );
    expect((keysBefore.keys as string[]).length).toBe(made.good.length);

    // Who wrote it: the importer's token.
    const h = await admin("POST", "/resources/history", { identifier: files[0]!.identifier });
    expect(h.json.versions[0].actor).toBe("importer");
  });

  it("keeps no direct identifier in a payload, an identifier or an object key", async () => {
    const all = await everything(admin);
    expect(all.length).toBeGreaterThan(0);
    const keys = (await admin("GET", `/s3/list?prefix=${encodeURIComponent("s3://resources/")}`)).json.keys as string[];
    const text = JSON.stringify(all) + "\n" + keys.join("\n");
    for (const planted of [...Object.values(PLANTED), ...Object.values(UIDS), "ZQX"])
      expect(text).not.toContain(planted);
  });

  it("--access-level restricted: a reader cleared for internal sees none of it", async () => {
    const run = await importDicom([join(made.dir, "other"), "--datasource", "ds-r", "--access-level", "restricted"]);
    expect(run.code).toBe(0);
    const mine = ofDatasource(await everything(admin), "ds-r");
    expect(mine.length).toBe(2 * 4);
    expect(new Set(mine.map((r) => r.access_level))).toEqual(new Set(["restricted"]));
    const reader = caller(url, TOKENS.internalOnly);
    const seen = await everything(reader);
    expect(seen.filter((r) => mine.some((m) => m.identifier === r.identifier))).toEqual([]);
  });

  it("--deidentify rewrites the stored headers by the basic profile, UIDs by keyed hashes, the same in every object", async () => {
    const keyFile = join(work, "deid.key");
    const key = "a-deidentify-key-for-the-test-0001";
    await writeFile(keyFile, `${key}\n`);
    const refused = await importDicom([made.dir, "--datasource", "ds-d", "--deidentify"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain("--deidentify needs a key");

    const run = await importDicom([made.dir, "--datasource", "ds-d", "--deidentify", "--deidentify-key-file", keyFile]);
    expect(run.stdout.trim()).toBe(
      `imported ${made.good.length} dicom instances, 0 already there, 2 skipped, 1 failed`,
    );
    const files = ofDatasource(await everything(admin), "ds-d").filter((r) => r.payload_type === "file");
    expect(files).toHaveLength(made.good.length);
    const studyUid = replacementUid(Buffer.from(key), UIDS.ctStudy);
    let withCtStudy = 0;
    for (const f of files) {
      const dump = await dcmdump(work, "stored.dcm", await download(admin, f.path as string));
      for (const planted of [...Object.values(PLANTED), ...Object.values(UIDS), "ZQX"])
        expect(dump).not.toContain(planted);
      expect(dump).not.toMatch(/^\(0009,/m);
      expect(dump).toMatch(/\(0012,0062\) CS \[YES\]/);
      expect(dump).toMatch(/\(7fe0,0010\) OW /);
      if (dump.includes(`(0020,000d) UI [${studyUid}]`)) withCtStudy++;
    }
    // CT and MR series of one study: one replacement StudyInstanceUID in all five objects.
    expect(withCtStudy).toBe(5);
    // The payloads come from the original headers (through the registry), as without --deidentify.
    const series = ofDatasource(await everything(admin), "ds-d").filter((r) => r.payload_type === "series");
    expect(series.map((s) => s.series_number).sort()).toEqual([1, 2, 3, 7]);
  });
});
