// The registry key lives apart from the data and rotates (docs/contract/06-registry.md): keys
// from the environment only on PostgreSQL, a key left in the database moved
// out once, several keys with ids (newest hashes, any resolves), and an
// online rehash that never fails a resolve nor duplicates a uid.
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registryCommand, runMoveKeyOut, runRederive, runRehash } from "../../src/cli/registry-command.js";
import { ConfigError, loadConfig, parseRegistryKeys } from "../../src/config.js";
import { createApp } from "../../src/app.js";
import { createLogger } from "../../src/log.js";
import {
  createRegistry,
  KEY_IN_DATABASE_MESSAGE,
  loadRegistryKeys,
  migrate,
  MISSING_KEY_MESSAGE,
  keyFingerprintMessage,
  keyNotConfiguredMessage,
  moveRegistryKeyOut,
  openDatabase,
  rehashRegistry,
  RegistryKeyError,
  RegistryRehashError,
  type Db,
  type RegistryKey,
} from "../../src/store/index.js";
import { describeBackends, uid } from "../store/backends.js";
import { expectCode } from "../store/helpers.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { ALL_GRANTS } from "../../src/access/index.js";

const key = (id: string): RegistryKey => ({ id, secret: Buffer.from(randomBytes(32).toString("base64url")) });
const asConfig = (keys: readonly RegistryKey[]) => keys.map((k) => `${k.id}:${k.secret.toString()}`).join(",");

describe("registry key configuration", () => {
  it("reads one whole key from REGISTRY_SECRET or its file, and a list from REGISTRY_SECRETS or its file", async () => {
    expect(loadConfig({ REGISTRY_SECRET: "k0" }).registryKeys).toEqual([{ id: "default", secret: "k0" }]);
    expect(loadConfig({ REGISTRY_SECRETS: "b:kb==, a:k:a" }).registryKeys).toEqual([
      { id: "b", secret: "kb==" },
      { id: "a", secret: "k:a" },
    ]);
    expect(loadConfig({}).registryKeys).toBeUndefined();
    const dir = await mkdtemp(join(tmpdir(), "rs-keys-"));
    try {
      const one = join(dir, "one");
      await writeFile(one, "c2VjcmV0LWtleQ\n");
      expect(loadConfig({ REGISTRY_SECRET_FILE: one }).registryKeys).toEqual([
        { id: "default", secret: "c2VjcmV0LWtleQ" },
      ]);
      const list = join(dir, "list");
      await writeFile(list, "# the first hashes new rows\nnew:kn\ndefault:kd\n");
      expect(loadConfig({ REGISTRY_SECRETS_FILE: list }).registryKeys).toEqual([
        { id: "new", secret: "kn" },
        { id: "default", secret: "kd" },
      ]);
      expect(() => loadConfig({ REGISTRY_SECRET_FILE: join(dir, "missing") })).toThrow(
        /REGISTRY_SECRET_FILE cannot be read/,
      );
      expect(() => loadConfig({ REGISTRY_SECRETS_FILE: join(dir, "missing") })).toThrow(
        /REGISTRY_SECRETS_FILE cannot be read/,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("a key means the same in a variable and in its file: `prod:xyz` and `a,b` are whole keys in both (issue 31)", async () => {
    const dir = await mkdtemp(join(tmpdir(), "rs-keys-"));
    try {
      for (const value of ["prod:xyz", "a,b", "x:y,z:w"]) {
        const file = join(dir, "key");
        await writeFile(file, `${value}\n`);
        const fromVariable = loadConfig({ REGISTRY_SECRET: value }).registryKeys;
        expect(fromVariable).toEqual([{ id: "default", secret: value }]);
        expect(loadConfig({ REGISTRY_SECRET_FILE: file }).registryKeys).toEqual(fromVariable);
        // And a list means the same in REGISTRY_SECRETS and its file.
        if (/^\w+:/.test(value))
          expect(loadConfig({ REGISTRY_SECRETS_FILE: file }).registryKeys).toEqual(
            loadConfig({ REGISTRY_SECRETS: value }).registryKeys,
          );
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("refuses malformed values naming the variable and never quoting a key", async () => {
    const dir = await mkdtemp(join(tmpdir(), "rs-keys-"));
    const listFile = join(dir, "list");
    // What an earlier version accepted in REGISTRY_SECRET_FILE: a list, now refused rather than read as one key.
    await writeFile(listFile, "new:SECRETVALUE\ndefault:SECRETVALUE2\n");
    const cases: [Record<string, string>, RegExp][] = [
      [{ REGISTRY_SECRETS: "no-id-here-SECRETVALUE" }, /REGISTRY_SECRETS entry 1 is not id:key/],
      [{ REGISTRY_SECRETS: "a:SECRETVALUE,a:SECRETVALUE2" }, /REGISTRY_SECRETS lists key id a twice/],
      [{ REGISTRY_SECRETS: "a b:SECRETVALUE" }, /REGISTRY_SECRETS entry 1/],
      [{ REGISTRY_SECRETS: "a>b:SECRETVALUE" }, /REGISTRY_SECRETS entry 1/],
      [{ REGISTRY_SECRETS: "a:" }, /REGISTRY_SECRETS entry 1/],
      [
        { REGISTRY_SECRET: "SECRETVALUE", REGISTRY_SECRETS: "a:SECRETVALUE" },
        /REGISTRY_SECRETS cannot be set together with REGISTRY_SECRET/,
      ],
      [
        { REGISTRY_SECRET_FILE: listFile, REGISTRY_SECRETS_FILE: listFile },
        /REGISTRY_SECRETS_FILE cannot be set together with REGISTRY_SECRET_FILE/,
      ],
      [{ REGISTRY_SECRET_FILE: listFile }, /REGISTRY_SECRET_FILE holds more than one line: .*REGISTRY_SECRETS_FILE/],
      [
        { REGISTRY_SECRET: "SECRETVALUE\nSECRETVALUE2" },
        /REGISTRY_SECRET holds more than one line: .*REGISTRY_SECRETS$/,
      ],
    ];
    try {
      for (const [env, message] of cases) {
        let err: unknown;
        try {
          loadConfig(env);
        } catch (e) {
          err = e;
        }
        expect(err, JSON.stringify(Object.keys(env))).toBeInstanceOf(ConfigError);
        expect((err as Error).message).toMatch(message);
        expect((err as Error).message).not.toContain("SECRETVALUE");
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    expect(() => parseRegistryKeys("", "X")).toThrow(/X holds no key/);
  });
});

describeBackends("registry key rotation", (backend) => {
  it("hashes with the first key, resolves under any, never registers a uid twice, and wraps in batches", async () => {
    const { db } = backend();
    const [a, b, c] = [key("a"), key("b"), key("c")];
    const ds = uid("ds");
    const old = createRegistry({ db, keys: [a] });
    const uids = Array.from({ length: 7 }, (_, i) => `MRN-${i}`);
    const patients = new Map<string, string>();
    for (const u of uids) patients.set(u, await old.registerPatient(ALL_GRANTS, ds, u));
    const p0 = patients.get("MRN-0") as string;
    const study = await old.registerStudy(ALL_GRANTS, p0, "1.2.3");

    const rotated = createRegistry({ db, keys: [b, a] });
    // Found under the older key; never registered again under the newer one.
    for (const u of uids) expect(await rotated.resolvePatient(ALL_GRANTS, ds, u)).toBe(patients.get(u));
    await expectCode(rotated.registerPatient(ALL_GRANTS, ds, "MRN-3"), Code.FailedPrecondition);
    await expectCode(rotated.registerStudy(ALL_GRANTS, p0, "1.2.3"), Code.FailedPrecondition);
    expect(await rotated.resolveStudy(ALL_GRANTS, p0, "1.2.3")).toBe(study);
    const fresh = await rotated.registerPatient(ALL_GRANTS, ds, "MRN-new");
    const keyChains = async () =>
      (
        await db.query<{ key_chain: string; n: string }>(
          `SELECT key_chain, count(*)::text AS n FROM (SELECT key_chain FROM registry_patients WHERE datasource_id = $1
           UNION ALL SELECT s.key_chain FROM registry_studies s JOIN registry_patients p ON p.identifier = s.patient_identifier
            WHERE p.datasource_id = $1) k GROUP BY key_chain ORDER BY key_chain`,
          [ds],
        )
      ).rows;
    expect(await keyChains()).toEqual([
      { key_chain: "a", n: "8" },
      { key_chain: "b", n: "1" },
    ]);

    // A rehash without every key rows depend on stops before changing anything, naming the id only.
    const err = await rehashRegistry(db, [c, b], { batchSize: 3 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RegistryRehashError);
    expect((err as Error).message).toMatch(/key id a, which is not listed/);
    expect((err as Error).message).not.toContain(a.secret.toString());

    const batches: number[] = [];
    const done = await rehashRegistry(db, [b, a], { batchSize: 3, onBatch: (p) => batches.push(p.rows) });
    expect(done).toEqual({ patients: 7, studies: 1 });
    expect(Math.max(...batches)).toBeLessThanOrEqual(3);
    // Wrapped rows depend on both keys; the row b hashed alone stays as it was.
    expect(await keyChains()).toEqual([
      { key_chain: "a>b", n: "8" },
      { key_chain: "b", n: "1" },
    ]);
    for (const u of uids) expect(await rotated.resolvePatient(ALL_GRANTS, ds, u)).toBe(patients.get(u));
    expect(await rotated.resolvePatient(ALL_GRANTS, ds, "MRN-new")).toBe(fresh);
    expect(await rotated.resolveStudy(ALL_GRANTS, p0, "1.2.3")).toBe(study);
    // The old key alone finds nothing any more, nor does the new one alone: both say which key they lack.
    expect((await expectCode(old.resolvePatient(ALL_GRANTS, ds, "MRN-1"), Code.Unavailable)).message).toMatch(
      /key b\b/,
    );
    expect(
      (await expectCode(createRegistry({ db, keys: [b] }).resolvePatient(ALL_GRANTS, ds, "MRN-1"), Code.Unavailable))
        .message,
    ).toMatch(/key a\b/);
    // Nothing left to move.
    expect(await rehashRegistry(db, [b, a])).toEqual({ patients: 0, studies: 0 });
  });
});

const pgOk = await postgresReachable();

describe.skipIf(!pgOk)("registry key on PostgreSQL", () => {
  let testDb: TestDatabase;
  let db: Db;
  beforeAll(async () => {
    testDb = await createTestDatabase();
    db = await openDatabase({ databaseUrl: testDb.url, poolSize: 4 });
    await migrate(db);
  });
  afterAll(async () => {
    await db?.close();
    await testDb?.drop();
  });

  it("start-up fails without a key, naming the variables; a key left in the database is moved out once, checked, then retired", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "rs-keys-"));
    try {
      const start = (env: Record<string, string>) =>
        createApp(
          loadConfig({ DATA_DIR: dataDir, LOG_LEVEL: "silent", DATABASE_URL: testDb.url, ...env }),
          createLogger("silent"),
        );
      await expect(start({})).rejects.toThrow(MISSING_KEY_MESSAGE);
      expect(MISSING_KEY_MESSAGE).toMatch(
        /REGISTRY_SECRET or REGISTRY_SECRET_FILE .*REGISTRY_SECRETS or REGISTRY_SECRETS_FILE/,
      );

      // What an earlier version left behind.
      const legacy = randomBytes(32).toString("base64url");
      await db.query("INSERT INTO registry_secret (id, secret) VALUES (true, $1)", [legacy]);
      const legacyRegistry = createRegistry({ db, keys: [{ id: "default", secret: Buffer.from(legacy) }] });
      const patient = await legacyRegistry.registerPatient(ALL_GRANTS, "ds-legacy", "MRN-legacy");
      const refused = await start({ REGISTRY_SECRET: legacy }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(RegistryKeyError);
      expect((refused as Error).message).toBe(KEY_IN_DATABASE_MESSAGE);
      expect(KEY_IN_DATABASE_MESSAGE).toMatch(/resource-store registry move-key-out/);
      expect(KEY_IN_DATABASE_MESSAGE).not.toContain(legacy);

      const stored = async () =>
        (await db.query<{ secret: string }>("SELECT secret FROM registry_secret")).rows.map((r) => r.secret);
      // A failure to print it (a closed pipe) leaves it in the database.
      const broken = registryCommand({
        env: { DATABASE_URL: testDb.url },
        stdout: () => Promise.reject(Object.assign(new Error("write EPIPE"), { code: "EPIPE" })),
        stderr: () => {},
      });
      await expect(broken.parseAsync(["move-key-out"], { from: "user" })).rejects.toThrow(/EPIPE/);
      expect(await stored()).toEqual([legacy]);

      // The command prints it once, and deletes it only once it is written out.
      const out: string[] = [];
      const err: string[] = [];
      const whenPrinted: string[][] = [];
      const command = registryCommand({
        env: { DATABASE_URL: testDb.url },
        stdout: async (t) => {
          whenPrinted.push(await stored());
          out.push(t);
        },
        stderr: (t) => err.push(t),
      });
      await command.parseAsync(["move-key-out"], { from: "user" });
      expect(out).toEqual([`${legacy}\n`]);
      expect(whenPrinted).toEqual([[legacy]]);
      expect(await stored()).toEqual([]);
      expect(err.join("")).toMatch(/REGISTRY_SECRET_FILE/);
      expect(err.join("")).not.toContain(legacy);
      expect(await runMoveKeyOut({ DATABASE_URL: testDb.url }, () => Promise.reject(new Error("never shown")))).toBe(
        false,
      );
      expect(await moveRegistryKeyOut(db, () => Promise.reject(new Error("never shown")))).toBe(false);

      // Moved out, the same key (id "default") serves the rows it hashed.
      const app = await start({ REGISTRY_SECRET: legacy });
      try {
        const keys = await loadRegistryKeys({
          configured: [{ id: "default", secret: legacy }],
          db,
          dataDir: undefined,
        });
        expect(await createRegistry({ db, keys }).resolvePatient(ALL_GRANTS, "ds-legacy", "MRN-legacy")).toBe(patient);
      } finally {
        await app.close();
      }
      // rehash through the command: summary and progress name ids and counts only.
      const newest = randomBytes(32).toString("base64url");
      const env = { DATABASE_URL: testDb.url, REGISTRY_SECRETS: `next:${newest},default:${legacy}` };
      const lines: string[] = [];
      const summary = await runRehash(env, { batchSize: 1, progress: (l) => lines.push(l) });
      expect(summary).toMatch(/^rehashed [1-9]\d* patients and 0 studies to key next$/);
      for (const l of [summary, ...lines]) {
        expect(l).not.toContain(newest);
        expect(l).not.toContain(legacy);
      }
      const keys = await loadRegistryKeys({ configured: loadConfig(env).registryKeys, db, dataDir: undefined });
      expect(await createRegistry({ db, keys }).resolvePatient(ALL_GRANTS, "ds-legacy", "MRN-legacy")).toBe(patient);

      // Start-up refuses a list without the key wrapped rows still need, and a known id with another key, by id.
      const withoutDefault = await start({ REGISTRY_SECRETS: `next:${newest}` }).catch((e: unknown) => e);
      expect(withoutDefault).toBeInstanceOf(RegistryKeyError);
      expect((withoutDefault as Error).message).toBe(keyNotConfiguredMessage("default"));
      const wrong = randomBytes(32).toString("base64url");
      const impostor = await start({ REGISTRY_SECRETS: `next:${newest},default:${wrong}` }).catch((e: unknown) => e);
      expect(impostor).toBeInstanceOf(RegistryKeyError);
      expect((impostor as Error).message).toBe(keyFingerprintMessage("default"));
      expect((impostor as Error).message).not.toContain(wrong);
      // The keys command: ids and counts only.
      const listing: string[] = [];
      await registryCommand({ env, stdout: (t) => void listing.push(t) }).parseAsync(["keys"], { from: "user" });
      expect(listing.join("")).toMatch(/^next\tlisted, hashes new rows\tfingerprint recorded\t1 rows depend on it\n/m);
      expect(listing.join("")).toMatch(/^default\tlisted\tfingerprint recorded\t1 rows depend on it\n/m);
      expect(listing.join("")).not.toContain(legacy);

      // Retiring "default": its rows re-derived from their uids, it can leave the list, and start-up agrees.
      const uidFile = join(dataDir, "uids.ndjson");
      await writeFile(uidFile, `${JSON.stringify({ datasource_id: "ds-legacy", external_uid: "MRN-legacy" })}\n\n`);
      const rederived: string[] = [];
      await registryCommand({ env, stdout: (t) => void rederived.push(t), stderr: () => {} }).parseAsync(
        ["rehash", "--uids", uidFile],
        { from: "user" },
      );
      expect(rederived).toEqual([
        "re-derived 1 patients and 0 studies under key next (0 already under it alone, 0 not registered)\n",
      ]);
      const after: string[] = [];
      await registryCommand({ env, stdout: (t) => void after.push(t) }).parseAsync(["keys"], { from: "user" });
      expect(after.join("")).toMatch(
        /^default\tlisted\tfingerprint recorded\t0 rows depend on it \(can be dropped\)\n/m,
      );
      await (await start({ REGISTRY_SECRETS: `next:${newest}` })).close();
      const keysNext = await loadRegistryKeys({ configured: [{ id: "next", secret: newest }], db, dataDir: undefined });
      expect(await createRegistry({ db, keys: keysNext }).resolvePatient(ALL_GRANTS, "ds-legacy", "MRN-legacy")).toBe(
        patient,
      );
      // A malformed line is refused by its number, never quoted.
      await writeFile(
        uidFile,
        '{"datasource_id": "ds-legacy", "external_uid": "MRN-legacy"}\n{"external_uid": "MRN-SECRET"}\n',
      );
      const bad = await runRederive(env, uidFile, { batchSize: 10 }).catch((e: unknown) => e);
      expect((bad as Error).message).toMatch(/^line 2 is not/);
      expect((bad as Error).message).not.toContain("MRN-SECRET");
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!pgOk)("rehash while two app instances register and resolve", () => {
  let testDb: TestDatabase;
  let servers: TestServer[] = [];
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close()));
    await testDb?.drop();
  });

  const OLD = 150;
  it("gives one identifier per uid and no failed resolve", async () => {
    testDb = await createTestDatabase();
    const [a, b] = [key("a"), key("b")];
    const post = async (s: TestServer, path: string, body: unknown) => {
      const res = await fetch(`${s.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as { identifier?: string; code?: string } };
    };
    // Registered under the old key alone.
    const first = await startTestServer({ DATABASE_URL: testDb.url, REGISTRY_SECRETS: asConfig([a]) });
    const known = new Map<string, string>();
    const seed = createRegistry({ db: first.app.db, keys: [a] });
    for (let i = 0; i < OLD; i++) known.set(`OLD-${i}`, await seed.registerPatient(ALL_GRANTS, "ds", `OLD-${i}`));
    await first.close();

    // Two instances on the new list; a rehash (a third pool, as the command runs) in small batches meanwhile.
    const env = { DATABASE_URL: testDb.url, REGISTRY_SECRETS: asConfig([b, a]) };
    servers = await Promise.all([startTestServer(env), startTestServer(env)]);
    const [s1, s2] = servers as [TestServer, TestServer];
    let rehashing = true;
    const rehash = runRehash(env, { batchSize: 2 }).finally(() => {
      rehashing = false;
    });
    const failedResolves: string[] = [];
    const wrongAnswers: string[] = [];
    const registered = new Map<string, string[]>();
    let rounds = 0;
    const resolver = async (s: TestServer, offset: number) => {
      // Resolve every known uid over and over while the rehash runs (and once after).
      do {
        rounds += 1;
        for (let i = 0; i < OLD; i += 1) {
          const u = `OLD-${(i + offset) % OLD}`;
          const r = await post(s, "/patients/resolve", { datasource_id: "ds", external_uid: u });
          if (r.status !== 200) failedResolves.push(`${u}: ${r.status}`);
          else if (r.body.identifier !== known.get(u)) wrongAnswers.push(u);
        }
      } while (rehashing);
    };
    const registrar = async () => {
      // Every new uid registered from both instances at once; every old one re-registered (must be refused).
      for (let i = 0; i < 40; i++) {
        const u = `NEW-${i}`;
        const answers = await Promise.all(
          [s1, s2].map((s) => post(s, "/patients/register", { datasource_id: "ds", external_uid: u })),
        );
        registered.set(
          u,
          answers.filter((r) => r.status === 200).map((r) => r.body.identifier as string),
        );
        const again = await post(i % 2 === 0 ? s1 : s2, "/patients/register", {
          datasource_id: "ds",
          external_uid: `OLD-${i}`,
        });
        if (again.status !== 400) wrongAnswers.push(`OLD-${i} registered twice`);
      }
    };
    await Promise.all([rehash, resolver(s1, 0), resolver(s2, OLD / 2), registrar()]);
    const summary = await rehash;

    expect(failedResolves).toEqual([]);
    expect(wrongAnswers).toEqual([]);
    expect(rounds).toBeGreaterThan(0);
    for (const [u, ids] of registered) expect(ids.length, u).toBe(1);
    expect(summary).toMatch(/^rehashed \d+ patients and 0 studies to key b$/);
    const { rows } = await servers[0]!.app.db.query<{ key_chain: string; n: string }>(
      "SELECT key_chain, count(*)::text AS n FROM registry_patients GROUP BY key_chain ORDER BY key_chain",
    );
    // One row per uid, old and new: the old ones wrapped in the first key, the new ones hashed by it alone.
    await runRehash(env, { batchSize: 50 });
    const total = rows.reduce((n, r) => n + Number(r.n), 0);
    expect(total).toBe(OLD + 40);
    const { rows: after } = await servers[0]!.app.db.query<{ key_chain: string; n: string }>(
      "SELECT key_chain, count(*)::text AS n FROM registry_patients GROUP BY key_chain ORDER BY key_chain",
    );
    expect(after).toEqual([
      { key_chain: "a>b", n: String(OLD) },
      { key_chain: "b", n: "40" },
    ]);
    for (const [u, id] of known)
      expect((await post(s2, "/patients/resolve", { datasource_id: "ds", external_uid: u })).body.identifier).toBe(id);
  }, 120_000);
});
