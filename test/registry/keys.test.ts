// The registry's key rules (docs/contract/06-registry.md): the order of listed
// keys only names the key that hashes new rows; the store keeps a
// fingerprint per key id and the chain of keys each row depends on, and
// start-up refuses a key it knows by another fingerprint or a list missing a
// key stored rows need; a key no row depends on any more can be dropped.
import { createHmac, randomBytes } from "node:crypto";
import { Code } from "@connectrpc/connect";
import { afterAll, describe, expect, it } from "vitest";
import {
  checkRegistryKeys,
  createRegistry,
  keyFingerprintMessage,
  keyNotConfiguredMessage,
  loadRegistryKeys,
  migrate,
  migrations,
  openDatabase,
  rederiveRegistry,
  registryKeyStatus,
  rehashRegistry,
  RegistryKeyError,
  type Db,
  type RegistryKey,
} from "../../src/store/index.js";
import { expectCode } from "../store/helpers.js";
import { describeFreshStores } from "../store/backends.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { ALL_GRANTS } from "../../src/access/index.js";

const key = (id: string): RegistryKey => ({ id, secret: Buffer.from(randomBytes(32).toString("base64url")) });
const pgOk = await postgresReachable();

async function rowsByChain(db: Db): Promise<Record<string, number>> {
  const { rows } = await db.query<{ key_chain: string; n: string }>(
    "SELECT key_chain, count(*)::text AS n FROM (SELECT key_chain FROM registry_patients UNION ALL SELECT key_chain FROM registry_studies) r GROUP BY 1",
  );
  return Object.fromEntries(rows.map((r) => [r.key_chain, Number(r.n)]));
}

async function storedHashes(db: Db): Promise<string[]> {
  const { rows } = await db.query<{ h: string }>(
    "SELECT encode(uid_hash, 'hex') AS h FROM registry_patients UNION ALL SELECT encode(uid_hash, 'hex') FROM registry_studies ORDER BY 1",
  );
  return rows.map((r) => r.h);
}

async function refusal(p: Promise<unknown>): Promise<Error> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RegistryKeyError);
  return err as Error;
}

// Each test gets a database of its own: the key checks look at every row of it.
describeFreshStores("registry key order", (fresh) => {
  it("appending or reordering keys changes no stored hash: every uid still resolves and none registers twice", async () => {
    const db = await fresh();
    const [a, b] = [key("a"), key("b")];
    const uids = Array.from({ length: 5 }, (_, i) => `MRN-${i}`);
    const before = createRegistry({
      db,
      keys: await loadRegistryKeys({ configured: [{ id: "a", secret: a.secret.toString() }], db, dataDir: undefined }),
    });
    const known = new Map<string, string>();
    for (const u of uids) known.set(u, await before.registerPatient(ALL_GRANTS, "ds", u));
    const study = await before.registerStudy(ALL_GRANTS, known.get("MRN-0") as string, "1.2.3");
    const hashes = await storedHashes(db);

    // A new key appended (not first): it hashes nothing, and nothing moves.
    await checkRegistryKeys(db, [a, b]);
    const appended = createRegistry({ db, keys: [a, b] });
    for (const u of uids) expect(await appended.resolvePatient(ALL_GRANTS, "ds", u)).toBe(known.get(u));
    expect(await appended.resolveStudy(ALL_GRANTS, known.get("MRN-0") as string, "1.2.3")).toBe(study);
    await expectCode(appended.registerPatient(ALL_GRANTS, "ds", "MRN-1"), Code.FailedPrecondition);
    const viaA = await appended.registerPatient(ALL_GRANTS, "ds", "MRN-a");
    expect(await storedHashes(db)).toEqual(expect.arrayContaining(hashes));

    // Moved first: it hashes new rows only.
    await checkRegistryKeys(db, [b, a]);
    const reordered = createRegistry({ db, keys: [b, a] });
    for (const u of uids) expect(await reordered.resolvePatient(ALL_GRANTS, "ds", u)).toBe(known.get(u));
    await expectCode(reordered.registerPatient(ALL_GRANTS, "ds", "MRN-a"), Code.FailedPrecondition);
    const viaB = await reordered.registerPatient(ALL_GRANTS, "ds", "MRN-b");
    expect(await rowsByChain(db)).toEqual({ a: 7, b: 1 });

    // And back: both resolve under either order; the stored hashes never changed.
    const back = createRegistry({ db, keys: [a, b] });
    expect(await back.resolvePatient(ALL_GRANTS, "ds", "MRN-b")).toBe(viaB);
    expect(await back.resolvePatient(ALL_GRANTS, "ds", "MRN-a")).toBe(viaA);
    await expectCode(back.registerPatient(ALL_GRANTS, "ds", "MRN-b"), Code.FailedPrecondition);
    const all = await storedHashes(db);
    for (const h of hashes) expect(all).toContain(h);
  });

  it("a process sees a chain another process's rehash recorded after it read the set, without a failed resolve or a second pseudonym", async () => {
    const db = await fresh();
    const [a, b] = [key("a"), key("b")];
    await checkRegistryKeys(db, [a, b]);
    const early = createRegistry({ db, keys: [a, b] });
    const id = await early.registerPatient(ALL_GRANTS, "ds", "MRN-x");
    expect(await early.resolvePatient(ALL_GRANTS, "ds", "MRN-x")).toBe(id); // reads the set: chains [a] and [b]
    await rehashRegistry(db, [b, a]); // records [a, b] and moves the row onto it
    expect(await rowsByChain(db)).toEqual({ "a>b": 1 });
    expect(await early.resolvePatient(ALL_GRANTS, "ds", "MRN-x")).toBe(id);
    await expectCode(early.registerPatient(ALL_GRANTS, "ds", "MRN-x"), Code.FailedPrecondition);
  });
});

describeFreshStores("registry key fingerprints and start-up checks", (fresh) => {
  it("refuses a known id with another key, and a list without a key stored rows need, naming the id and never a key", async () => {
    const db = await fresh();
    const [a, b] = [key("prod"), key("next")];
    const keys = await loadRegistryKeys({
      configured: [{ id: "prod", secret: a.secret.toString() }],
      db,
      dataDir: undefined,
    });
    await createRegistry({ db, keys }).registerPatient(ALL_GRANTS, "ds", "MRN-1");
    const { rows } = await db.query<{ key_id: string; fingerprint: Uint8Array }>(
      "SELECT key_id, fingerprint FROM registry_keys",
    );
    expect(rows.map((r) => r.key_id)).toEqual(["prod"]);
    const fingerprint = Buffer.from(rows[0]!.fingerprint);
    expect(fingerprint.length).toBe(32);
    expect(fingerprint.includes(a.secret)).toBe(false);

    const impostor = randomBytes(32).toString("base64url");
    const mismatch = await refusal(
      loadRegistryKeys({ configured: [{ id: "prod", secret: impostor }], db, dataDir: undefined }),
    );
    expect(mismatch.message).toBe(keyFingerprintMessage("prod"));
    expect(mismatch.message).toMatch(/registry key prod /);
    expect(mismatch.message).not.toContain(impostor);

    // The key rows need, left out of the list: refused by name.
    const missing = await refusal(
      loadRegistryKeys({ configured: [{ id: "next", secret: b.secret.toString() }], db, dataDir: undefined }),
    );
    expect(missing.message).toBe(keyNotConfiguredMessage("prod"));
    expect(missing.message).not.toContain(b.secret.toString());
    // A refused start-up records nothing: "next" is still unknown.
    expect((await db.query("SELECT 1 FROM registry_keys WHERE key_id = 'next'")).rows).toEqual([]);

    // A fingerprint is recorded for a key even before it hashes a row.
    await checkRegistryKeys(db, [a, b]);
    await refusal(checkRegistryKeys(db, [a, key("next")]));
  });

  it("a wrap keeps the older key needed; re-deriving from the uids frees it, and then it can be dropped", async () => {
    const db = await fresh();
    const [a, b] = [key("old"), key("new")];
    const reg = createRegistry({ db, keys: await loadRegistryKeysOf(db, [a]) });
    const uids = Array.from({ length: 6 }, (_, i) => `MRN-${i}`);
    const known = new Map<string, string>();
    for (const u of uids) known.set(u, await reg.registerPatient(ALL_GRANTS, "ds", u));
    const p0 = known.get("MRN-0") as string;
    const study = await reg.registerStudy(ALL_GRANTS, p0, "1.2.3");

    await checkRegistryKeys(db, [b, a]);
    const done = await rehashRegistry(db, [b, a], { batchSize: 4 });
    expect(done).toEqual({ patients: 6, studies: 1 });
    expect(await rowsByChain(db)).toEqual({ "old>new": 7 });
    // Wrapped, the rows still need "old": a list without it is refused, and a process without it says so instead of "not registered".
    expect((await refusal(checkRegistryKeys(db, [b]))).message).toBe(keyNotConfiguredMessage("old"));
    await expectCode(createRegistry({ db, keys: [b] }).resolvePatient(ALL_GRANTS, "ds", "MRN-1"), Code.Unavailable);
    const status = await registryKeyStatus(db, [b, a]);
    expect(status.find((s) => s.id === "old")?.rows).toBe(7);

    // Re-derived from the uids, most rows need "new" alone.
    const listed = [
      ...uids.slice(0, 5).map((u) => ({ datasourceId: "ds", externalUid: u })),
      { patientIdentifier: p0, externalUid: "1.2.3" },
    ];
    const re = await rederiveRegistry(
      db,
      [b, a],
      [...listed, { datasourceId: "ds", externalUid: "MRN-never" }, listed[0]!],
      { batchSize: 2 },
    );
    expect(re).toEqual({ patients: 5, studies: 1, unchanged: 1, notFound: 1 });
    expect(await rowsByChain(db)).toEqual({ "old>new": 1, new: 6 });
    await refusal(checkRegistryKeys(db, [b]));

    // The last one too: nothing depends on "old" any more, so it can be dropped.
    await rederiveRegistry(db, [b, a], [{ datasourceId: "ds", externalUid: "MRN-5" }]);
    expect((await registryKeyStatus(db, [b])).map((s) => [s.id, s.configured, s.rows])).toEqual([
      ["new", true, 7],
      ["old", false, 0],
    ]);
    await checkRegistryKeys(db, [b]);
    const alone = createRegistry({ db, keys: [b] });
    for (const [u, id] of known) expect(await alone.resolvePatient(ALL_GRANTS, "ds", u)).toBe(id);
    expect(await alone.resolveStudy(ALL_GRANTS, p0, "1.2.3")).toBe(study);
    await expectCode(alone.registerPatient(ALL_GRANTS, "ds", "MRN-3"), Code.FailedPrecondition);
    // Its id stays taken by its fingerprint: another key under "old" is refused.
    await refusal(checkRegistryKeys(db, [b, key("old")]));
  });

  it("records the chains of rows hashed before chains existed from the keys configured at the first start-up", async () => {
    const db = await fresh(migrations.filter((m) => m.id <= 12));
    const [d, n] = [key("default"), key("new")];
    // What the earlier version wrote: a chain from the last listed key, each listed before it wrapping it.
    const link0 = (kind: string, scope: string, uid: string) => {
      const h = createHmac("sha256", d.secret);
      for (const part of [kind, scope, uid]) {
        const bytes = Buffer.from(part, "utf8");
        const len = Buffer.alloc(4);
        len.writeUInt32BE(bytes.length);
        h.update(len).update(bytes);
      }
      return h.digest();
    };
    const wrapN = (h: Buffer) => createHmac("sha256", n.secret).update(h).digest();
    await db.query(
      "INSERT INTO registry_patients (identifier, datasource_id, uid_hash, key_id) VALUES ('pat_1', 'ds', $1, 'default')",
      [link0("patient", "ds", "MRN-1")],
    );
    await db.query(
      "INSERT INTO registry_patients (identifier, datasource_id, uid_hash, key_id) VALUES ('pat_2', 'ds', $1, 'new')",
      [wrapN(link0("patient", "ds", "MRN-2"))],
    );
    await db.query(
      "INSERT INTO registry_studies (identifier, patient_identifier, uid_hash, key_id) VALUES ('stu_1', 'pat_2', $1, 'new')",
      [wrapN(link0("study", "pat_2", "1.2"))],
    );
    await migrate(db);

    // Without "new" (which rows were recorded under), refused by name, and nothing recorded.
    expect((await refusal(checkRegistryKeys(db, [d]))).message).toBe(keyNotConfiguredMessage("new"));
    expect((await db.query("SELECT 1 FROM registry_keys")).rows).toEqual([]);

    // With the list the rows were hashed under: every row resolves, and its chain is recorded.
    await checkRegistryKeys(db, [n, d]);
    expect(await rowsByChain(db)).toEqual({ default: 1, "default>new": 2 });
    const reg = createRegistry({ db, keys: [n, d] });
    expect(await reg.resolvePatient(ALL_GRANTS, "ds", "MRN-1")).toBe("pat_1");
    expect(await reg.resolvePatient(ALL_GRANTS, "ds", "MRN-2")).toBe("pat_2");
    expect(await reg.resolveStudy(ALL_GRANTS, "pat_2", "1.2")).toBe("stu_1");
    await expectCode(reg.registerPatient(ALL_GRANTS, "ds", "MRN-2"), Code.FailedPrecondition);
    // From now on the order is free: the same keys the other way round still resolve every row.
    await checkRegistryKeys(db, [d, n]);
    const swapped = createRegistry({ db, keys: [d, n] });
    expect(await swapped.resolvePatient(ALL_GRANTS, "ds", "MRN-2")).toBe("pat_2");
    expect(await swapped.resolvePatient(ALL_GRANTS, "ds", "MRN-1")).toBe("pat_1");
  });
});

function loadRegistryKeysOf(db: Db, keys: readonly RegistryKey[]): Promise<RegistryKey[]> {
  return loadRegistryKeys({
    configured: keys.map((k) => ({ id: k.id, secret: k.secret.toString() })),
    db,
    dataDir: undefined,
  });
}

describe.skipIf(!pgOk)("registrations while processes disagree on the first key (mid-way through a restart)", () => {
  const made: TestDatabase[] = [];
  const opened: Db[] = [];
  afterAll(async () => {
    await Promise.all(opened.map((d) => d.close()));
    await Promise.all(made.map((t) => t.drop()));
  });

  it("give one identifier per uid: [a, b] and [b, a] on two pools, 40 racing registrations per uid", async () => {
    const t = await createTestDatabase();
    made.push(t);
    const [one, two] = await Promise.all([0, 1].map(() => openDatabase({ databaseUrl: t.url, poolSize: 8 })));
    opened.push(one!, two!);
    await migrate(one!);
    const [a, b] = [key("a"), key("b")];
    await checkRegistryKeys(one!, [a, b]);
    await checkRegistryKeys(two!, [b, a]);
    const registries = [createRegistry({ db: one!, keys: [a, b] }), createRegistry({ db: two!, keys: [b, a] })];
    for (let u = 0; u < 5; u++) {
      const results = await Promise.allSettled(
        Array.from({ length: 40 }, (_, i) => registries[i % 2]!.registerPatient(ALL_GRANTS, "ds", `MRN-${u}`)),
      );
      const ok = results.filter((r) => r.status === "fulfilled");
      expect(ok.length, `MRN-${u}`).toBe(1);
      for (const r of results)
        if (r.status === "rejected") expect((r.reason as { code?: unknown }).code).toBe(Code.FailedPrecondition);
      const id = (ok[0] as PromiseFulfilledResult<string>).value;
      for (const reg of registries) expect(await reg.resolvePatient(ALL_GRANTS, "ds", `MRN-${u}`)).toBe(id);
    }
    const { rows } = await one!.query<{ n: string }>("SELECT count(*)::text AS n FROM registry_patients");
    expect(rows[0]?.n).toBe("5");
  });

  it("re-deriving from the uids is online: every resolve answers, no uid registers twice meanwhile", async () => {
    const t = await createTestDatabase();
    made.push(t);
    const [one, two] = await Promise.all([0, 1].map(() => openDatabase({ databaseUrl: t.url, poolSize: 8 })));
    opened.push(one!, two!);
    await migrate(one!);
    const [a, b] = [key("a"), key("b")];
    await checkRegistryKeys(one!, [a]);
    const seed = createRegistry({ db: one!, keys: [a] });
    const known = new Map<string, string>();
    for (let i = 0; i < 60; i++) known.set(`MRN-${i}`, await seed.registerPatient(ALL_GRANTS, "ds", `MRN-${i}`));
    await checkRegistryKeys(one!, [b, a]);
    await rehashRegistry(one!, [b, a], { batchSize: 25 });
    const serving = createRegistry({ db: two!, keys: [b, a] });
    let running = true;
    const failures: string[] = [];
    let rounds = 0;
    const resolver = async () => {
      do {
        rounds += 1;
        for (const [u, id] of known) {
          const got = await serving.resolvePatient(ALL_GRANTS, "ds", u).catch((e: Error) => e.message);
          if (got !== id) failures.push(`${u}: ${got}`);
        }
        const again = await serving.registerPatient(ALL_GRANTS, "ds", `MRN-${rounds % 60}`).then(
          () => "registered twice",
          () => undefined,
        );
        if (again) failures.push(again);
      } while (running);
    };
    const rederive = rederiveRegistry(
      one!,
      [b, a],
      [...known.keys()].map((u) => ({ datasourceId: "ds", externalUid: u })),
      { batchSize: 2 },
    ).finally(() => {
      running = false;
    });
    const [done] = await Promise.all([rederive, resolver()]);
    expect(done.patients).toBe(60);
    expect(failures).toEqual([]);
    expect(rounds).toBeGreaterThan(0);
    expect(await rowsByChain(one!)).toEqual({ b: 60 });
  });
});
