import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createRegistry,
  loadRegistryKeys,
  REGISTRY_SECRET_FILE,
  createResourceStore,
  migrate,
  openDatabase,
  type Db,
} from "../../src/store/index.js";
import { uid } from "../store/backends.js";
import { expectCode } from "../store/helpers.js";
import { openMemoryStore } from "../support/pglite-image.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { buildServices, describeServices, type Services } from "../lineage/harness.js";
import { TEST_REGISTRY_SECRET } from "../support/registry-key.js";
import { ALL_GRANTS } from "../../src/access/index.js";

const PATIENT_ID = /^pat_[0-9a-f]{32}$/;
const STUDY_ID = /^stu_[0-9a-f]{32}$/;

describeServices("patient and study registry", (svc) => {
  const reg = () => svc().registry;

  it("registers a patient once and resolves it on both revisions", async () => {
    const d = uid("ds");
    const { identifier } = await reg().registerPatient({ datasourceId: d, externalUid: "MRN-0001" });
    expect(identifier).toMatch(PATIENT_ID);
    expect((await reg().resolvePatient({ datasourceId: d, externalUid: "MRN-0001" })).identifier).toBe(identifier);
    expect((await svc().registryV2.resolvePatient({ datasourceId: d, externalUid: "MRN-0001" })).identifier).toBe(
      identifier,
    );
    await expectCode(reg().registerPatient({ datasourceId: d, externalUid: "MRN-0001" }), Code.FailedPrecondition);
    await expectCode(
      svc().registryV2.registerPatient({ datasourceId: d, externalUid: "MRN-0001" }),
      Code.FailedPrecondition,
    );
    await expectCode(reg().resolvePatient({ datasourceId: d, externalUid: "MRN-0002" }), Code.FailedPrecondition);
    // the same uid in another datasource is another patient
    const other = await reg().registerPatient({ datasourceId: uid("ds"), externalUid: "MRN-0001" });
    expect(other.identifier).toMatch(PATIENT_ID);
    expect(other.identifier).not.toBe(identifier);
  });

  it("registers studies under registered patients only", async () => {
    const d = uid("ds");
    const { identifier: patient } = await reg().registerPatient({ datasourceId: d, externalUid: "p" });
    await expectCode(
      reg().registerStudy({ patientIdentifier: "pat_unregistered", externalUid: "1.2.3" }),
      Code.FailedPrecondition,
    );
    const { identifier: studyId } = await reg().registerStudy({ patientIdentifier: patient, externalUid: "1.2.3" });
    expect(studyId).toMatch(STUDY_ID);
    expect((await reg().resolveStudy({ patientIdentifier: patient, externalUid: "1.2.3" })).identifier).toBe(studyId);
    await expectCode(
      reg().registerStudy({ patientIdentifier: patient, externalUid: "1.2.3" }),
      Code.FailedPrecondition,
    );
    await expectCode(reg().resolveStudy({ patientIdentifier: patient, externalUid: "9.9.9" }), Code.FailedPrecondition);
    const { identifier: patient2 } = await reg().registerPatient({ datasourceId: d, externalUid: "q" });
    await expectCode(
      reg().resolveStudy({ patientIdentifier: patient2, externalUid: "1.2.3" }),
      Code.FailedPrecondition,
    );
    expect((await reg().registerStudy({ patientIdentifier: patient2, externalUid: "1.2.3" })).identifier).not.toBe(
      studyId,
    );
  });

  it("refuses empty and malformed values with invalid_argument", async () => {
    await expectCode(reg().registerPatient({ datasourceId: "", externalUid: "x" }), Code.InvalidArgument);
    await expectCode(reg().registerPatient({ datasourceId: "d", externalUid: "" }), Code.InvalidArgument);
    await expectCode(reg().resolvePatient({ datasourceId: "d", externalUid: "x".repeat(5000) }), Code.InvalidArgument);
    await expectCode(reg().registerStudy({ patientIdentifier: "", externalUid: "x" }), Code.InvalidArgument);
    await expectCode(reg().registerStudy({ patientIdentifier: "not an id", externalUid: "x" }), Code.InvalidArgument);
    await expectCode(reg().resolveStudy({ patientIdentifier: "pat_x", externalUid: "" }), Code.InvalidArgument);
  });

  it("stores the external uid only as a keyed hash", async () => {
    const d = uid("ds");
    const secretUid = `uid-${uid()}-secret`;
    const { identifier: patient } = await reg().registerPatient({ datasourceId: d, externalUid: secretUid });
    await reg().registerStudy({ patientIdentifier: patient, externalUid: secretUid });
    const { db } = svc().backend;
    for (const table of ["registry_patients", "registry_studies"]) {
      const { rows } = await db.query<{ n: string }>(
        `SELECT count(*)::text AS n FROM ${table} t WHERE row_to_json(t)::text LIKE '%' || $1 || '%'`,
        [secretUid],
      );
      expect(rows[0]?.n, table).toBe("0");
    }
    const { rows } = await db.query<{ hash: string }>(
      "SELECT encode(uid_hash, 'hex') AS hash FROM registry_patients WHERE identifier = $1",
      [patient],
    );
    expect(rows[0]?.hash).toMatch(/^[0-9a-f]{64}$/);
    // another key gives other hashes: the patient cannot be found without the server's secret
    const foreign = createRegistry({ db, keys: [{ id: "default", secret: Buffer.from("another key") }] });
    await expectCode(foreign.resolvePatient(ALL_GRANTS, d, secretUid), Code.FailedPrecondition);
  });
});

describe("the registry secret", () => {
  let dir: string;
  let db: Db;
  let other: Db;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "registry-secret-"));
    db = await openMemoryStore();
    other = await openMemoryStore();
    await Promise.all([migrate(db), migrate(other)]);
  });
  afterAll(async () => {
    await db.close();
    await other.close();
    await rm(dir, { recursive: true, force: true });
  });

  const secretOf = async (configured: string | undefined, on: Db) =>
    (
      await loadRegistryKeys({
        configured: configured === undefined ? undefined : [{ id: "default", secret: configured }],
        db: on,
        dataDir: dir,
      })
    )[0]?.secret.toString();

  it("REGISTRY_SECRET wins; otherwise the embedded store keeps one generated key under DATA_DIR, mode 0600", async () => {
    expect(await secretOf("configured", other)).toBe("configured");
    const keys = await Promise.all(Array.from({ length: 5 }, () => secretOf(undefined, db)));
    const first = keys[0] ?? "";
    expect(first.length).toBeGreaterThanOrEqual(32);
    for (const k of keys) expect(k).toBe(first);
    const file = join(dir, REGISTRY_SECRET_FILE);
    expect((await readFile(file, "utf8")).trim()).toBe(first);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect(await secretOf(undefined, db)).toBe(first);
  });
});

const pgReachable = await postgresReachable();

describe.skipIf(!pgReachable)("registry on PostgreSQL with two app instances", () => {
  let testDb: TestDatabase;
  let a: Db;
  let b: Db;
  beforeAll(async () => {
    testDb = await createTestDatabase();
    a = await openDatabase({ databaseUrl: testDb.url, poolSize: 10 });
    b = await openDatabase({ databaseUrl: testDb.url, poolSize: 10 });
    await Promise.all([migrate(a), migrate(b)]);
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await testDb?.drop();
  });

  it("refuse to start without a configured key, and write none into the database (issue 20)", async () => {
    for (const db of [a, b]) {
      await expect(loadRegistryKeys({ configured: undefined, db, dataDir: undefined })).rejects.toThrow(
        /REGISTRY_SECRET or REGISTRY_SECRET_FILE .* or REGISTRY_SECRETS or REGISTRY_SECRETS_FILE/,
      );
    }
    const { rows } = await a.query<{ n: string }>("SELECT count(*)::text AS n FROM registry_secret");
    expect(rows[0]?.n).toBe("0");
    const configured = [{ id: "default", secret: TEST_REGISTRY_SECRET }];
    const [ka, kb] = await Promise.all([
      loadRegistryKeys({ configured, db: a, dataDir: undefined }),
      loadRegistryKeys({ configured, db: b, dataDir: undefined }),
    ]);
    expect(ka[0]?.secret.toString()).toBe(kb[0]?.secret.toString());
  });

  it("50 concurrent registrations of one pair, over two app instances, give exactly one success and one identifier", async () => {
    const [sa, sb] = await Promise.all(
      [a, b].map((db) => buildServices({ kind: "postgres", db, store: createResourceStore(db), url: testDb.url })),
    );
    const instances = [sa, sb] as Services[];
    /** 50 attempts alternating between the instances; answers the one identifier allocated. */
    const race = async (table: string, attempt: (s: Services) => Promise<{ identifier: string }>): Promise<string> => {
      const results = await Promise.allSettled(
        Array.from({ length: 50 }, (_, i) => attempt(instances[i % 2] as Services)),
      );
      const ok = results.filter((r) => r.status === "fulfilled").map((r) => r.value.identifier);
      const failed = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
      expect(ok.length, table).toBe(1);
      expect(
        failed.map((r) => (r.reason as { code?: unknown }).code),
        table,
      ).toEqual(Array(49).fill(Code.FailedPrecondition));
      const { rows } = await a.query<{ identifier: string }>(`SELECT identifier FROM ${table}`);
      expect(
        rows.map((r) => r.identifier),
        table,
      ).toEqual(ok);
      return ok[0] as string;
    };
    const pair = { datasourceId: "ds-race", externalUid: "MRN-race" };
    const patient = await race("registry_patients", (s) => s.registry.registerPatient(pair));
    for (const s of instances) expect((await s.registry.resolvePatient(pair)).identifier).toBe(patient);
    const studyPair = { patientIdentifier: patient, externalUid: "1.2.840.race" };
    const studyId = await race("registry_studies", (s) => s.registryV2.registerStudy(studyPair));
    for (const s of instances) expect((await s.registry.resolveStudy(studyPair)).identifier).toBe(studyId);
  });
});
