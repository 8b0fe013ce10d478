// The DICOM receiver (docs/dicom.md): dcmtk's echoscu and storescu against
// the service's C-ECHO/C-STORE SCP. A study sent in two associations is one
// study, an instance sent twice is stored once, the actor is
// dicom:<calling AE>, and the same folder through import-dicom afterwards
// finds every resource already there: the receiver made the same tree. The
// service itself (src/main.ts) starts it from its environment, files what its
// spool held when it stopped, and leaves the spool empty.
import { cp, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { receiverConfigFrom } from "../../src/dicom/receiver-config.js";
import { startDicomReceiver, type DicomReceiver } from "../../src/dicom/receiver.js";
import { createLogger } from "../../src/log.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { buildCli, runCli } from "../cli/run-cli.js";
import { listeningPort, startMain, type MainProcess } from "../support/main-process.js";
import { hasDcmtk, makeDicomFolder, PLANTED, UIDS, type Made } from "./fixtures.js";
import { API_TOKENS, caller, dcmdump, download, everything, exec, TOKENS, type Flat } from "./support.js";

let work: string;
let made: Made;
let server: TestServer;
let receiver: DicomReceiver;
const url = () => server.url;
const admin = caller(url, TOKENS.admin);

beforeAll(async () => {
  if (!(await hasDcmtk()))
    throw new Error("these tests send with dcmtk's storescu and echoscu: apt-get install -y dcmtk");
  work = await mkdtemp(join(tmpdir(), "rs-dicom-scp-"));
  [made] = await Promise.all([makeDicomFolder(work), buildCli()]);
  server = await startTestServer({ API_TOKENS });
  const config = receiverConfigFrom(
    { DICOM_PORT: "0", DICOM_DATASOURCE: "ds-scp", DICOM_ALLOWED_AES: "MODALITY1, MODALITY2" },
    "127.0.0.1",
    work,
  )!;
  receiver = await startDicomReceiver(config, server.app.localTransport, createLogger("silent"));
});

afterAll(async () => {
  await receiver?.close();
  await server?.close();
  await rm(work, { recursive: true, force: true });
});

function dcmtk(
  tool: "echoscu" | "storescu",
  aet: string,
  files: string[] = [],
  called = "RESOURCESTORE",
  port = receiver.port,
) {
  return exec(tool, [
    "-aet",
    aet,
    "-aec",
    called,
    "127.0.0.1",
    String(port),
    ...files.map((f) => join(made.dir, f)),
  ]).then(
    (r) => ({ code: 0, out: r.stdout + r.stderr }),
    (err: { code?: number; stdout?: string; stderr?: string }) => ({
      code: err.code ?? 1,
      out: `${err.stdout ?? ""}${err.stderr ?? ""}`,
    }),
  );
}

describe("DICOM receiver", () => {
  it("answers C-ECHO to an allowed AE and refuses an AE not allowed or a wrong called AE title", async () => {
    expect((await dcmtk("echoscu", "MODALITY1")).code).toBe(0);
    const stranger = await dcmtk("echoscu", "INTRUDER");
    expect(stranger.code).not.toBe(0);
    expect(stranger.out).toMatch(/Association Rejected/i);
    const wrongCalled = await dcmtk("echoscu", "MODALITY1", [], "SOMEONE");
    expect(wrongCalled.code).not.toBe(0);
  });

  it("files a study sent in two associations as one study, a duplicate once, as dicom:<calling AE>; import-dicom of the folder then finds all of it", async () => {
    const ct = made.good.filter((f) => f.startsWith("ct/"));
    const rest = made.good.filter((f) => !f.startsWith("ct/"));
    expect((await dcmtk("storescu", "MODALITY1", ct)).code).toBe(0);
    expect((await dcmtk("storescu", "MODALITY2", rest)).code).toBe(0);
    // Sent again: stored once.
    expect((await dcmtk("storescu", "MODALITY1", [ct[0]!])).code).toBe(0);

    const all = await everything(admin);
    const patients = new Set(
      all.filter((r) => r.payload_type === "patient" && r.datasource_id === "ds-scp").map((r) => r.identifier),
    );
    const studies = all.filter((r) => r.payload_type === "study" && patients.has(r.parent_identifier!));
    expect(studies).toHaveLength(3);
    const ctStudy = studies.find((s) => s.modality === "CT\\MR")!;
    const series = all.filter((r) => r.payload_type === "series" && r.parent_identifier === ctStudy.identifier);
    expect(series.map((s) => [s.modality, s.instance_count]).sort()).toEqual([
      ["CT", 3],
      ["MR", 2],
    ]);
    const seriesIds = new Set(
      all
        .filter((r) => r.payload_type === "series" && studies.some((s) => s.identifier === r.parent_identifier))
        .map((r) => r.identifier),
    );
    const files = all.filter((r): r is Flat => r.payload_type === "file" && seriesIds.has(r.parent_identifier!));
    expect(files).toHaveLength(made.good.length);
    expect(JSON.stringify(all)).not.toContain(PLANTED.patientId);

    const ctFile = files.find((f) => series.some((s) => s.modality === "CT" && s.identifier === f.parent_identifier))!;
    expect(
      (await admin("POST", "/resources/history", { identifier: ctFile.identifier })).json.versions.map(
        (v: { actor: string }) => v.actor,
      ),
    ).toEqual(["dicom:MODALITY1"]);
    const mrSeries = series.find((s) => s.modality === "MR")!;
    expect(
      (await admin("POST", "/resources/history", { identifier: mrSeries.identifier })).json.versions[0].actor,
    ).toBe("dicom:MODALITY2");

    // The same folder through import-dicom: the same identifiers, so nothing is new.
    const run = await runCli(["--url", url(), "import-dicom", made.dir, "--datasource", "ds-scp"], {
      env: { RESOURCE_STORE_TOKEN: TOKENS.importer },
    });
    expect(run.stdout.trim()).toBe(
      `imported 0 dicom instances, ${made.good.length} already there, 2 skipped, 1 failed`,
    );
    const after = await everything(admin);
    expect(after.length).toBe(all.length);
    // Every instance filed: nothing is left in the spool, whose folders only the service's user may open.
    const spooled = await readdir(join(work, "dicom-spool"), { recursive: true });
    expect(spooled.filter((f) => f.endsWith(".seg"))).toEqual([]);
    for (const folder of [".", `ae-${Buffer.from("MODALITY1", "latin1").toString("hex")}`])
      expect((await stat(join(work, "dicom-spool", folder))).mode & 0o777).toBe(0o700);
  });
});

describe("the service with DICOM_PORT (src/main.ts)", () => {
  it("starts the receiver from its environment, files what its spool held, and stores de-identified objects", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "rs-dicom-main-"));
    // An embedded PGlite from the run's initialised copy, instead of paying initdb.
    await cp(inject("pgliteTemplate"), join(dataDir, "pglite"), { recursive: true });
    // What a service that stopped before filing left in its spool: a segment with one whole record of
    // MODALITY9 (a 4-byte little-endian length, then the object) and one cut short while it was written.
    const left = made.good.find((f) => f.startsWith("other/multiframe"))!;
    const spool = join(dataDir, "dicom-spool", `ae-${Buffer.from("MODALITY9", "latin1").toString("hex")}`);
    await mkdir(spool, { recursive: true });
    const object = await readFile(join(made.dir, left));
    const record = (bytes: Buffer, length = bytes.length) => {
      const head = Buffer.alloc(4);
      head.writeUInt32LE(length, 0);
      return Buffer.concat([head, bytes]);
    };
    await writeFile(
      join(spool, "left.seg"),
      Buffer.concat([record(object), record(object.subarray(0, 300), object.length)]),
    );
    const key = "a-deidentify-key-for-the-main-test";
    let main: MainProcess | undefined;
    try {
      main = startMain({
        DATA_DIR: dataDir,
        API_TOKENS,
        DICOM_PORT: "0",
        DICOM_DATASOURCE: "ds-main",
        DICOM_AE_TITLE: "STOREMAIN",
        DICOM_ALLOWED_AES: "MODALITY9",
        DICOM_DEIDENTIFY: "1",
        DICOM_DEIDENTIFY_KEY: key,
      });
      const child = main;
      const port = await listeningPort(child);
      // Logged once the spool left from before is filed.
      const dicomPort = await listeningPort(child, 60_000, "DICOM receiver listening");
      const call = caller(() => `http://127.0.0.1:${port}`, TOKENS.admin);

      expect((await dcmtk("echoscu", "MODALITY9", [], "STOREMAIN", dicomPort)).code).toBe(0);
      expect((await dcmtk("echoscu", "MODALITY9", [], "RESOURCESTORE", dicomPort)).code).not.toBe(0);
      expect((await dcmtk("echoscu", "MODALITY1", [], "STOREMAIN", dicomPort)).out).toMatch(/Association Rejected/i);
      const ct = made.good.filter((f) => f.startsWith("ct/"));
      expect((await dcmtk("storescu", "MODALITY9", ct, "STOREMAIN", dicomPort)).code).toBe(0);

      const all = await everything(call);
      const patients = new Set(
        all.filter((r) => r.payload_type === "patient" && r.datasource_id === "ds-main").map((r) => r.identifier),
      );
      const studies = all.filter((r) => r.payload_type === "study" && patients.has(r.parent_identifier!));
      const series = all.filter(
        (r) => r.payload_type === "series" && studies.some((s) => s.identifier === r.parent_identifier),
      );
      const files = all.filter(
        (r) => r.payload_type === "file" && series.some((s) => s.identifier === r.parent_identifier),
      );
      // The CT study (its CT and MR series) sent now, the multi-frame study from the spool.
      expect(studies).toHaveLength(2);
      expect(files).toHaveLength(ct.length + 1);
      expect(
        (await call("POST", "/resources/history", { identifier: files[0]!.identifier })).json.versions[0].actor,
      ).toBe("dicom:MODALITY9");
      // DICOM_DEIDENTIFY: no planted identifier and no original UID in any stored header.
      for (const f of files) {
        const dump = await dcmdump(dataDir, "stored.dcm", await download(call, f.path as string));
        for (const planted of [...Object.values(PLANTED), ...Object.values(UIDS)]) expect(dump).not.toContain(planted);
      }
      expect(await readdir(spool)).toEqual([]);
    } finally {
      main?.proc.kill("SIGTERM");
      await main?.exited;
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe("DICOM receiver settings", () => {
  it("is off without DICOM_PORT and refuses a port without a datasource, a bad AE title, or --deidentify without a key", () => {
    expect(receiverConfigFrom({}, "127.0.0.1", "/data")).toBeUndefined();
    expect(() => receiverConfigFrom({ DICOM_PORT: "11112" }, "127.0.0.1", "/data")).toThrow(
      /DICOM_DATASOURCE is required/,
    );
    expect(() =>
      receiverConfigFrom({ DICOM_PORT: "11112", DICOM_DATASOURCE: "ds", DICOM_AE_TITLE: "A\\B" }, "127.0.0.1", "/data"),
    ).toThrow(/DICOM_AE_TITLE/);
    expect(() =>
      receiverConfigFrom({ DICOM_PORT: "11112", DICOM_DATASOURCE: "ds", DICOM_DEIDENTIFY: "1" }, "127.0.0.1", "/data"),
    ).toThrow(/DICOM_DEIDENTIFY_KEY/);
    expect(receiverConfigFrom({ DICOM_PORT: "11112", DICOM_DATASOURCE: "ds" }, "127.0.0.1", "/data")).toMatchObject({
      port: 11112,
      host: "127.0.0.1",
      aeTitle: "RESOURCESTORE",
      accessLevel: "internal",
      spoolDir: "/data/dicom-spool",
    });
  });
});
