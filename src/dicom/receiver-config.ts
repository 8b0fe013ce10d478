// The receiver's settings (docs/dicom.md), read from the environment apart
// from the receiver itself, so that a service without DICOM_PORT never loads
// the DIMSE library.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError } from "../config.js";
import type { AccessLevel } from "./filer.js";

export interface ReceiverConfig {
  readonly port: number;
  readonly host: string;
  /** The called AE title it answers to (DICOM_AE_TITLE, default RESOURCESTORE). */
  readonly aeTitle: string;
  /** Calling AE titles let in (DICOM_ALLOWED_AES); unset: any. */
  readonly allowedAes?: ReadonlySet<string>;
  readonly datasource: string;
  readonly accessLevel: AccessLevel;
  readonly deidentifyKey?: Buffer;
  /** Where received objects wait, synced, until they are filed (DICOM_SPOOL_DIR, default DATA_DIR/dicom-spool). */
  readonly spoolDir: string;
  /** Instances filed together (several associations at once share a batch). */
  readonly batchSize: number;
}

const AE_TITLE = /^[\x20-\x5b\x5d-\x7e]{1,16}$/;

function aeTitle(value: string, variable: string): string {
  const t = value.trim();
  if (!AE_TITLE.test(t) || t === "")
    throw new ConfigError(
      variable,
      `must be 1 to 16 printable characters without a backslash, got ${JSON.stringify(value)}`,
    );
  return t;
}

/** The receiver's configuration, or undefined when DICOM_PORT is unset. */
export function receiverConfigFrom(
  env: NodeJS.ProcessEnv,
  defaultHost: string,
  dataDir: string,
): ReceiverConfig | undefined {
  const rawPort = env.DICOM_PORT?.trim();
  if (rawPort === undefined || rawPort === "") return undefined;
  if (!/^\d+$/.test(rawPort) || Number(rawPort) > 65535)
    throw new ConfigError("DICOM_PORT", `must be a port number, got ${JSON.stringify(rawPort)}`);
  const datasource = env.DICOM_DATASOURCE?.trim();
  if (datasource === undefined || !/^[A-Za-z0-9][A-Za-z0-9._:@-]{0,255}$/.test(datasource)) {
    throw new ConfigError(
      "DICOM_DATASOURCE",
      "is required with DICOM_PORT: the datasource that received patients are registered in",
    );
  }
  const level = (env.DICOM_ACCESS_LEVEL?.trim() || "internal") as AccessLevel;
  if (!["public", "internal", "restricted"].includes(level))
    throw new ConfigError("DICOM_ACCESS_LEVEL", "must be public, internal or restricted");
  const allowed = env.DICOM_ALLOWED_AES?.split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  let key: Buffer | undefined;
  if (/^(1|true|yes|on)$/i.test(env.DICOM_DEIDENTIFY?.trim() ?? "")) {
    let text = env.DICOM_DEIDENTIFY_KEY?.trim();
    if (env.DICOM_DEIDENTIFY_KEY_FILE !== undefined) {
      try {
        text = readFileSync(env.DICOM_DEIDENTIFY_KEY_FILE, "utf8").split(/\r?\n/, 1)[0]?.trim();
      } catch {
        throw new ConfigError("DICOM_DEIDENTIFY_KEY_FILE", "cannot be read");
      }
    }
    if (text === undefined || text.length < 16)
      throw new ConfigError(
        "DICOM_DEIDENTIFY_KEY",
        "(or DICOM_DEIDENTIFY_KEY_FILE) of at least 16 characters is required with DICOM_DEIDENTIFY",
      );
    key = Buffer.from(text, "utf8");
  }
  return {
    port: Number(rawPort),
    host: env.DICOM_HOST?.trim() || defaultHost,
    aeTitle: aeTitle(env.DICOM_AE_TITLE ?? "RESOURCESTORE", "DICOM_AE_TITLE"),
    ...(allowed !== undefined && allowed.length > 0
      ? { allowedAes: new Set(allowed.map((a) => aeTitle(a, "DICOM_ALLOWED_AES"))) }
      : {}),
    datasource,
    accessLevel: level,
    spoolDir: env.DICOM_SPOOL_DIR?.trim() || join(dataDir, "dicom-spool"),
    ...(key !== undefined ? { deidentifyKey: key } : {}),
    batchSize: 256,
  };
}
