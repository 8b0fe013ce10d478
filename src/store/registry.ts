// Server-allocated identifiers for patients and studies. External uids are
// kept only as HMAC-SHA256 under the registry secret, with the scope (the
// datasource, or the patient) in the hashed message, so one uid registered
// under two datasources gives unrelated hashes.
//
// Allocation is one INSERT ... ON CONFLICT DO NOTHING RETURNING: the unique
// constraints decide between concurrent registrations of the same pair, on
// one connection or across service processes. Never read-then-insert.
import { createHmac, randomBytes } from "node:crypto";
import { failedPrecondition, invalidArgument } from "../errors.js";
import { checkIdentifier } from "../schema/validate.js";
import type { Queryable } from "./db.js";

/** Longest datasource_id or external_uid accepted, in characters. */
export const MAX_REGISTRY_VALUE_LENGTH = 1024;

export interface Registry {
  registerPatient(datasourceId: string, externalUid: string): Promise<string>;
  resolvePatient(datasourceId: string, externalUid: string): Promise<string>;
  registerStudy(patientIdentifier: string, externalUid: string): Promise<string>;
  resolveStudy(patientIdentifier: string, externalUid: string): Promise<string>;
}

export interface RegistryOptions {
  readonly db: Queryable;
  /** The HMAC key (see registry-secret.ts). */
  readonly secret: Uint8Array;
}

/** "pat_" or "stu_" and 128 random bits in hex: nothing about the uid is in it. */
export function allocateIdentifier(prefix: "pat" | "stu"): string {
  return `${prefix}_${randomBytes(16).toString("hex")}`;
}

function checkValue(value: string, what: string): string {
  if (value.length === 0) throw invalidArgument(`${what} is required`);
  if (value.length > MAX_REGISTRY_VALUE_LENGTH) {
    throw invalidArgument(`${what} is longer than ${MAX_REGISTRY_VALUE_LENGTH} characters`);
  }
  return value;
}

export function createRegistry(options: RegistryOptions): Registry {
  const { db, secret } = options;
  // Length-prefixed parts, so ("a", "bc") and ("ab", "c") never hash alike.
  const uidHash = (kind: string, scope: string, uid: string): Buffer => {
    const h = createHmac("sha256", secret);
    for (const part of [kind, scope, uid]) {
      const bytes = Buffer.from(part, "utf8");
      const len = Buffer.alloc(4);
      len.writeUInt32BE(bytes.length);
      h.update(len).update(bytes);
    }
    return h.digest();
  };
  const patientArgs = (datasourceId: string, externalUid: string) => {
    checkValue(datasourceId, "datasource_id");
    checkValue(externalUid, "external_uid");
    return uidHash("patient", datasourceId, externalUid);
  };
  const studyArgs = (patientIdentifier: string, externalUid: string) => {
    checkValue(patientIdentifier, "patient_identifier");
    checkIdentifier(patientIdentifier, "patient_identifier");
    checkValue(externalUid, "external_uid");
    return uidHash("study", patientIdentifier, externalUid);
  };

  return {
    async registerPatient(datasourceId, externalUid) {
      const hash = patientArgs(datasourceId, externalUid);
      const { rows } = await db.query<{ identifier: string }>(
        `INSERT INTO registry_patients (identifier, datasource_id, uid_hash) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING RETURNING identifier`,
        [allocateIdentifier("pat"), datasourceId, hash],
      );
      const id = rows[0]?.identifier;
      if (id === undefined) throw failedPrecondition("this patient is registered already");
      return id;
    },
    async resolvePatient(datasourceId, externalUid) {
      const hash = patientArgs(datasourceId, externalUid);
      const { rows } = await db.query<{ identifier: string }>(
        "SELECT identifier FROM registry_patients WHERE datasource_id = $1 AND uid_hash = $2",
        [datasourceId, hash],
      );
      const id = rows[0]?.identifier;
      if (id === undefined) throw failedPrecondition("this patient is not registered");
      return id;
    },
    async registerStudy(patientIdentifier, externalUid) {
      const hash = studyArgs(patientIdentifier, externalUid);
      // The patient must be registered: the SELECT yields no row otherwise.
      const { rows } = await db.query<{ identifier: string }>(
        `INSERT INTO registry_studies (identifier, patient_identifier, uid_hash)
         SELECT $1, p.identifier, $3 FROM registry_patients p WHERE p.identifier = $2
         ON CONFLICT DO NOTHING RETURNING identifier`,
        [allocateIdentifier("stu"), patientIdentifier, hash],
      );
      const id = rows[0]?.identifier;
      if (id !== undefined) return id;
      // Only to word the refusal: registered patients are never removed, so
      // the answer cannot change between the insert and this look.
      const { rows: patient } = await db.query("SELECT 1 FROM registry_patients WHERE identifier = $1", [patientIdentifier]);
      if (patient.length === 0) throw failedPrecondition(`patient ${patientIdentifier} is not registered`);
      throw failedPrecondition("this study is registered already");
    },
    async resolveStudy(patientIdentifier, externalUid) {
      const hash = studyArgs(patientIdentifier, externalUid);
      const { rows } = await db.query<{ identifier: string }>(
        "SELECT identifier FROM registry_studies WHERE patient_identifier = $1 AND uid_hash = $2",
        [patientIdentifier, hash],
      );
      const id = rows[0]?.identifier;
      if (id === undefined) throw failedPrecondition("this study is not registered");
      return id;
    },
  };
}
