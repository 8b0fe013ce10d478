// Real DICOM files for the tests, made here with Debian's dcmtk (dump2dcm,
// img2dcm, dcmmkdir): nothing is downloaded. Every identifier the store must
// never keep is planted in them (PLANTED), so a scan can look for it.
import { execFile } from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";

const exec = promisify(execFile);

/** Strings that must never reach a payload, an identifier, an object key or (with --deidentify) a stored header. */
export const PLANTED = {
  patientName: "ZQXPLANTED^NAME",
  patientId: "PID-ZQX-4711",
  otherPatientId: "PID-ZQX-0815",
  accession: "ACC-ZQX-99",
  birthDate: "19650412",
  institution: "ZQX General Hospital",
  referring: "DRZQX^REFERRING",
  performing: "DRZQX^PERFORMING",
  privateValue: "PRIVATE-ZQX-SECRET",
} as const;

export const UIDS = {
  ctStudy: "1.2.826.0.1.3680043.8.498.1001",
  ctSeries: "1.2.826.0.1.3680043.8.498.1001.1",
  mrSeries: "1.2.826.0.1.3680043.8.498.1001.2",
  mfStudy: "1.2.826.0.1.3680043.8.498.1002",
  mfSeries: "1.2.826.0.1.3680043.8.498.1002.1",
  anonStudy: "1.2.826.0.1.3680043.8.498.1003",
  anonSeries: "1.2.826.0.1.3680043.8.498.1003.1",
  frameOfReference: "1.2.826.0.1.3680043.8.498.1001.9",
} as const;

export async function hasDcmtk(): Promise<boolean> {
  try {
    await exec("dump2dcm", ["--version"]);
    await exec("dcmdump", ["--version"]);
    return true;
  } catch {
    return false;
  }
}

function pixels(count: number, seed: number): string {
  return Array.from({ length: count }, (_, i) => ((i * 37 + seed) % 4096).toString(16).padStart(4, "0")).join("\\");
}

interface Spec {
  sopClass: string;
  sop: string;
  study: string;
  series: string;
  modality: string;
  seriesNumber: number;
  instanceNumber: number;
  patientId?: string;
  frames?: number;
  description?: string;
}

function dump(s: Spec): string {
  const frames = s.frames ?? 1;
  const lines = [
    `(0002,0002) UI ${s.sopClass}`,
    `(0002,0003) UI ${s.sop}`,
    `(0008,0016) UI ${s.sopClass}`,
    `(0008,0018) UI ${s.sop}`,
    `(0008,0020) DA [20240314]`,
    `(0008,0030) TM [101500]`,
    `(0008,0050) SH [${PLANTED.accession}]`,
    `(0008,0060) CS [${s.modality}]`,
    `(0008,0080) LO [${PLANTED.institution}]`,
    `(0008,0090) PN [${PLANTED.referring}]`,
    `(0008,1030) LO [Thorax routine]`,
    `(0008,103e) LO [${s.description ?? `${s.modality} series ${s.seriesNumber}`}]`,
    `(0008,1050) PN [${PLANTED.performing}]`,
    `(0009,0010) LO [ZQX PRIVATE CREATOR]`,
    `(0009,1001) LO [${PLANTED.privateValue}]`,
    `(0010,0010) PN [${PLANTED.patientName}]`,
    ...(s.patientId !== undefined ? [`(0010,0020) LO [${s.patientId}]`, `(0010,0021) LO [ZQX-ISSUER]`] : []),
    `(0010,0030) DA [${PLANTED.birthDate}]`,
    `(0010,0040) CS [F]`,
    `(0018,0015) CS [CHEST]`,
    `(0020,000d) UI ${s.study}`,
    `(0020,000e) UI ${s.series}`,
    `(0020,0011) IS [${s.seriesNumber}]`,
    `(0020,0013) IS [${s.instanceNumber}]`,
    `(0020,0052) UI ${UIDS.frameOfReference}`,
    `(0028,0002) US 1`,
    `(0028,0004) CS [MONOCHROME2]`,
    ...(frames > 1 ? [`(0028,0008) IS [${frames}]`] : []),
    `(0028,0010) US 4`,
    `(0028,0011) US 4`,
    `(0028,0100) US 16`,
    `(0028,0101) US 12`,
    `(0028,0102) US 11`,
    `(0028,0103) US 0`,
    `(7fe0,0010) OW ${pixels(16 * frames, s.instanceNumber)}`,
  ];
  return `${lines.join("\n")}\n`;
}

const CT = "1.2.840.10008.5.1.4.1.1.2";
const MR = "1.2.840.10008.5.1.4.1.1.4";
const MULTIFRAME = "1.2.840.10008.5.1.4.1.1.7.3";

/** The instances of the folder (what a scan of it must find), without the files that must be refused or skipped. */
export const INSTANCES = {
  ct: 3,
  mr: 2,
  multiframe: 1,
  anonymous: 1,
} as const;

export interface Made {
  readonly dir: string;
  /** Relative paths of the good instances. */
  readonly good: string[];
  readonly truncated: string;
  readonly notDicom: string;
  readonly dicomdir: string;
}

async function make(workDir: string, out: string, s: Spec, syntax: "+te" | "+ti"): Promise<void> {
  const dumpFile = join(workDir, `${s.sop}.txt`);
  await writeFile(dumpFile, dump(s));
  await exec("dump2dcm", ["-q", syntax, dumpFile, out]);
}

/**
 * A folder as a modality export leaves it: a CT series in explicit VR little
 * endian, an MR series of the same study in implicit VR little endian (one
 * file without an extension, in a deeper folder), a multi-frame object, a
 * study without PatientID, a truncated file, a text file and a DICOMDIR.
 */
export async function makeDicomFolder(root: string): Promise<Made> {
  const dir = join(root, "export");
  const work = join(root, "dumps");
  await mkdir(join(dir, "ct"), { recursive: true });
  await mkdir(join(dir, "mr", "deeper"), { recursive: true });
  await mkdir(join(dir, "other"), { recursive: true });
  await mkdir(work, { recursive: true });
  const good: string[] = [];
  for (let i = 1; i <= INSTANCES.ct; i++) {
    const rel = `ct/IM${i}.dcm`;
    await make(
      work,
      join(dir, rel),
      {
        sopClass: CT,
        sop: `${UIDS.ctSeries}.${i}`,
        study: UIDS.ctStudy,
        series: UIDS.ctSeries,
        modality: "CT",
        seriesNumber: 1,
        instanceNumber: i,
        patientId: PLANTED.patientId,
      },
      "+te",
    );
    good.push(rel);
  }
  for (let i = 1; i <= INSTANCES.mr; i++) {
    const rel = i === 1 ? `mr/MR${i}` : `mr/deeper/MR${i}.DCM`;
    await make(
      work,
      join(dir, rel),
      {
        sopClass: MR,
        sop: `${UIDS.mrSeries}.${i}`,
        study: UIDS.ctStudy,
        series: UIDS.mrSeries,
        modality: "MR",
        seriesNumber: 2,
        instanceNumber: i,
        patientId: PLANTED.patientId,
      },
      "+ti",
    );
    good.push(rel);
  }
  await make(
    work,
    join(dir, "other/multiframe.dcm"),
    {
      sopClass: MULTIFRAME,
      sop: `${UIDS.mfSeries}.1`,
      study: UIDS.mfStudy,
      series: UIDS.mfSeries,
      modality: "OT",
      seriesNumber: 7,
      instanceNumber: 1,
      frames: 5,
      patientId: PLANTED.otherPatientId,
    },
    "+te",
  );
  good.push("other/multiframe.dcm");
  await make(
    work,
    join(dir, "other/no-patient-id.dcm"),
    {
      sopClass: CT,
      sop: `${UIDS.anonSeries}.1`,
      study: UIDS.anonStudy,
      series: UIDS.anonSeries,
      modality: "CT",
      seriesNumber: 3,
      instanceNumber: 1,
    },
    "+ti",
  );
  good.push("other/no-patient-id.dcm");
  good.sort();

  // Cut in the middle of its pixel data.
  const whole = join(work, "whole.dcm");
  await make(
    work,
    whole,
    {
      sopClass: CT,
      sop: `${UIDS.ctSeries}.99`,
      study: UIDS.ctStudy,
      series: UIDS.ctSeries,
      modality: "CT",
      seriesNumber: 1,
      instanceNumber: 99,
      patientId: PLANTED.patientId,
    },
    "+te",
  );
  const { readFile } = await import("node:fs/promises");
  const bytes = await readFile(whole);
  await writeFile(join(dir, "ct/IM99.dcm"), bytes.subarray(0, bytes.length - 10));
  await writeFile(join(dir, "README.txt"), "exported by the modality\n");
  // A DICOMDIR: a directory record of the medium, not an instance (its meta header says so).
  const dirDump = join(work, "dicomdir.txt");
  await writeFile(
    dirDump,
    [
      "(0002,0002) UI =MediaStorageDirectoryStorage",
      "(0002,0003) UI 1.2.826.0.1.3680043.8.498.1999",
      "(0004,1130) CS [ZQXMEDIA]",
      "(0004,1200) up 0",
      "(0004,1202) up 0",
      "(0004,1212) US 0",
      "(0004,1220) SQ (Sequence with explicit length #=0)",
      "(fffe,e0dd) na (SequenceDelimitationItem for re-encod.)",
    ].join("\n") + "\n",
  );
  await exec("dump2dcm", ["-q", "+te", dirDump, join(dir, "DICOMDIR")]);
  return { dir, good, truncated: "ct/IM99.dcm", notDicom: "README.txt", dicomdir: "DICOMDIR" };
}
