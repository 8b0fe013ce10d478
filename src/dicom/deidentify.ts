// `--deidentify` (and DICOM_DEIDENTIFY for the receiver): the stored object's
// header is rewritten by the Basic Application Level Confidentiality Profile
// of DICOM PS3.15 Annex E. The profile's table is data (basic-profile.json);
// this file only applies it. UIDs are replaced by keyed hashes (2.25.<HMAC>),
// so the same UID maps to the same replacement in every object, every run
// and in both the importer and the receiver, given the same key; without the
// key the original cannot be recovered or confirmed.
import { createHmac } from "node:crypto";
import dcmjs, { type DicomDataset, type DicomElement } from "dcmjs";
import profile from "./basic-profile.json" with { type: "json" };

dcmjs.log.setLevel("error");

type Action = "D" | "Z" | "X" | "K" | "C" | "U";

/**
 * One action per attribute. A combined code of the table (X/Z, X/D, Z/D,
 * X/Z/D, X/Z/U*) leaves the choice to the IOD (type 1, 2 or 3): the choice
 * here keeps the object valid for any of them, a dummy before an empty value
 * before removal.
 */
function actionOf(code: string): Action {
  const options = code.replace(/\*/g, "").split("/");
  for (const a of ["U", "D", "Z", "X", "K", "C"] as const) if (options.includes(a)) return a;
  throw new Error(`basic-profile.json: unknown action ${code}`);
}

const ACTIONS = new Map<string, Action>(
  (profile.attributes as [string, string, string][]).map(([tag, , code]) => [tag.toUpperCase(), actionOf(code)]),
);

/** How many attributes the table names (docs/dicom.md quotes it). */
export const PROFILE_ATTRIBUTES = ACTIONS.size;

/** A UID's replacement: 2.25 and the decimal of 128 bits of HMAC-SHA256 (PS3.5 B.2), at most 44 characters. */
export function replacementUid(key: Buffer, uid: string): string {
  const digest = createHmac("sha256", key).update(uid.replace(/\0/g, "").trim()).digest();
  return `2.25.${BigInt(`0x${digest.subarray(0, 16).toString("hex")}`).toString(10)}`;
}

function dummy(el: DicomElement): unknown[] {
  switch (el.vr) {
    case "PN":
      return [{ Alphabetic: "ANONYMOUS" }];
    case "DA":
      return ["19000101"];
    case "TM":
      return ["000000"];
    case "DT":
      return ["19000101000000"];
    case "AS":
      return ["000Y"];
    case "IS":
    case "DS":
      return ["0"];
    case "CS":
      return ["ANON"];
    case "US":
    case "SS":
    case "UL":
    case "SL":
    case "FL":
    case "FD":
      return [0];
    case "SQ":
      return [];
    default:
      return ["ANONYMIZED"];
  }
}

function rewrite(ds: DicomDataset, key: Buffer): void {
  for (const tag of Object.keys(ds)) {
    const el = ds[tag]!;
    // Private attributes (odd group) go: the profile without its Retain Safe Private option.
    if (parseInt(tag.slice(0, 4), 16) % 2 === 1) {
      delete ds[tag];
      continue;
    }
    const action = ACTIONS.get(tag.toUpperCase());
    if (action === "X" || action === "C") {
      delete ds[tag];
      continue;
    }
    if (action === "Z") {
      ds[tag] = { vr: el.vr, Value: [] };
      continue;
    }
    if (action === "D") {
      ds[tag] = { vr: el.vr, Value: dummy(el) };
      continue;
    }
    if (action === "U" && el.vr === "UI") {
      el.Value = (el.Value ?? []).map((v) => (typeof v === "string" && v !== "" ? replacementUid(key, v) : v));
      continue;
    }
    // Kept, and walked: the table holds inside sequences too.
    if (el.vr === "SQ") for (const item of el.Value ?? []) rewrite(item as DicomDataset, key);
  }
}

/** The object with its header rewritten; pixel data and attributes the profile keeps are left as they were. */
export function deidentify(bytes: Uint8Array, key: Buffer): Buffer {
  const copy = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  const file = dcmjs.data.DicomMessage.readFile(copy, { ignoreErrors: false });
  rewrite(file.dict, key);
  file.dict["00120062"] = { vr: "CS", Value: ["YES"] };
  file.dict["00120063"] = { vr: "LO", Value: ["DICOM PS3.15 E.1 Basic Application Level Confidentiality Profile"] };
  const mediaUid = file.meta["00020003"];
  const original = mediaUid?.Value?.[0];
  if (mediaUid !== undefined && typeof original === "string") mediaUid.Value = [replacementUid(key, original)];
  return Buffer.from(file.write());
}
