// What the store reads from a DICOM Part 10 object (docs/dicom.md, "What is
// read"): the UIDs that place it in the tree and the few attributes that
// become payload fields. Direct identifiers (PatientID, IssuerOfPatientID)
// are read only to be handed to the registry, which keeps them as keyed
// hashes; they are never put into a payload.
import dicomParser from "dicom-parser";

/** The Media Storage SOP Class of a DICOMDIR (PS3.10): a directory of a medium, not an instance. */
const MEDIA_DIRECTORY_SOP_CLASS = "1.2.840.10008.1.3.10";

export interface InstanceHeader {
  readonly sopClassUid: string;
  readonly sopInstanceUid: string;
  readonly studyInstanceUid: string;
  readonly seriesInstanceUid: string;
  readonly transferSyntaxUid: string;
  /** Absent when the object has no (or an empty) PatientID. */
  readonly patientId?: string;
  readonly issuerOfPatientId?: string;
  readonly sex?: "female" | "male" | "other" | "unknown";
  readonly birthYear?: number;
  /** YYYY-MM-DD, only when StudyDate is a real date. */
  readonly studyDate?: string;
  readonly modality?: string;
  readonly studyDescription?: string;
  readonly seriesDescription?: string;
  readonly bodyPart?: string;
  readonly seriesNumber?: number;
}

/** Why an object cannot be filed: said once, named with the file. */
export class DicomReadError extends Error {
  constructor(
    message: string,
    /** `not-dicom` and `dicomdir` are skipped and listed; `unreadable` fails the run. */
    readonly kind: "not-dicom" | "dicomdir" | "unreadable",
  ) {
    super(message);
    this.name = "DicomReadError";
  }
}

function text(ds: dicomParser.DataSet, tag: string): string | undefined {
  const v = ds.string(tag);
  if (v === undefined) return undefined;
  const t = v.replace(/\0/g, "").trim();
  return t === "" ? undefined : t;
}

const SEX: Record<string, InstanceHeader["sex"]> = { F: "female", M: "male", O: "other" };

function dateOf(da: string | undefined): string | undefined {
  if (da === undefined || !/^\d{8}$/.test(da)) return undefined;
  const iso = `${da.slice(0, 4)}-${da.slice(4, 6)}-${da.slice(6, 8)}`;
  const d = new Date(`${iso}T00:00:00Z`);
  return !Number.isNaN(d.getTime()) && d.toISOString().startsWith(iso) ? iso : undefined;
}

function intOf(is: string | undefined): number | undefined {
  if (is === undefined || !/^[+-]?\d{1,9}$/.test(is)) return undefined;
  return Number(is);
}

/** True when the bytes start as a Part 10 file does: a 128-byte preamble, then "DICM". */
function looksLikePart10(bytes: Uint8Array): boolean {
  return (
    bytes.length >= 132 && bytes[128] === 0x44 && bytes[129] === 0x49 && bytes[130] === 0x43 && bytes[131] === 0x4d
  );
}

/**
 * Reads a whole Part 10 object. The whole dataset is walked (pixel data
 * included), so an object cut anywhere, in its header or in its pixels, is
 * refused rather than stored half.
 */
export function readHeader(bytes: Uint8Array): InstanceHeader {
  if (!looksLikePart10(bytes)) throw new DicomReadError("not a DICOM Part 10 file (no DICM prefix)", "not-dicom");
  let ds: dicomParser.DataSet;
  try {
    ds = dicomParser.parseDicom(bytes);
  } catch (err) {
    const why =
      typeof err === "string"
        ? err
        : err instanceof Error
          ? err.message
          : ((err as { exception?: string }).exception ?? String(err));
    throw new DicomReadError(`unreadable DICOM (${why.replace(/^dicomParser\.\w+: /, "")})`, "unreadable");
  }
  const sopClassUid = text(ds, "x00020002") ?? text(ds, "x00080016") ?? "";
  if (sopClassUid === MEDIA_DIRECTORY_SOP_CLASS)
    throw new DicomReadError("a DICOMDIR (a directory of a medium), not an instance", "dicomdir");
  const sopInstanceUid = text(ds, "x00080018") ?? text(ds, "x00020003");
  const studyInstanceUid = text(ds, "x0020000d");
  const seriesInstanceUid = text(ds, "x0020000e");
  const missing = [
    sopInstanceUid === undefined ? "SOPInstanceUID" : "",
    studyInstanceUid === undefined ? "StudyInstanceUID" : "",
    seriesInstanceUid === undefined ? "SeriesInstanceUID" : "",
  ].filter((m) => m !== "");
  if (missing.length > 0) throw new DicomReadError(`no ${missing.join(", ")}`, "unreadable");
  const birth = text(ds, "x00100030");
  const sex = text(ds, "x00100040");
  const out: InstanceHeader = {
    sopClassUid,
    sopInstanceUid: sopInstanceUid!,
    studyInstanceUid: studyInstanceUid!,
    seriesInstanceUid: seriesInstanceUid!,
    transferSyntaxUid: text(ds, "x00020010") ?? "1.2.840.10008.1.2",
    patientId: text(ds, "x00100020"),
    issuerOfPatientId: text(ds, "x00100021"),
    sex: sex === undefined ? undefined : (SEX[sex.toUpperCase()] ?? "unknown"),
    birthYear: birth !== undefined && /^\d{4}/.test(birth) ? Number(birth.slice(0, 4)) : undefined,
    studyDate: dateOf(text(ds, "x00080020")),
    modality: text(ds, "x00080060"),
    studyDescription: text(ds, "x00081030"),
    seriesDescription: text(ds, "x0008103e"),
    bodyPart: text(ds, "x00180015"),
    seriesNumber: intOf(text(ds, "x00200011")),
  };
  return out;
}
