// Dump and restore (docs/dump-format.md): a store built by a random
// history on PGlite is dumped and restored into PGlite and PostgreSQL; the
// copy holds the same versions with the same periods, answers reads at every
// stamp of the history as the source does, and holds the same registry rows.
// An incremental dump continues it. A store that is not empty, a cut dump, a
// changed byte and a newer format are refused, and leave the target empty.
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import { gunzipSync, gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { describeDumpError } from "../../src/cli/dump.js";
import {
  createRegistry,
  createResources,
  deleteResources,
  loadRegistryKeys,
  DUMP_FORMAT_VERSION,
  elementText,
  migrate,
  openDatabase,
  payloadText,
  readResources,
  restoreDump,
  restoreResources,
  ts,
  updateResources,
  writeDump,
  type Db,
} from "../../src/store/index.js";
import { dumpRecords, dumpToBuffer, pgliteStores } from "./dump-support.js";
import { createTestDatabase, postgresReachable, REQUIRE_POSTGRES, type TestDatabase } from "../support/postgres.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

const dumpBytes = (db: Db, since?: string): Promise<Buffer> =>
  dumpToBuffer(db, { batchSize: 7, ...(since !== undefined ? { since } : {}) });

const restoreFrom = (db: Db, bytes: Buffer) => restoreDump(db, Readable.from([bytes]), { batchSize: 5 });

/** A dump's lines between its header and its trailer (which hold the moment it was written and its checksum). */
const body = (bytes: Buffer): string[] => gunzipSync(bytes).toString("utf8").trimEnd().split("\n").slice(1, -1);

const stores = pgliteStores("rs-dump-");
const freshPglite = stores.open;

/** Everything a read can see: every version with its period, the registry, the clock. */
async function contents(db: Db): Promise<unknown> {
  const { rows: versions } = await db.query(
    `SELECT identifier, version::text, ${ts("tx_from")} AS f, ${ts("tx_to")} AS t, payload_type, parent_identifier, license, access_level,
            derived_from, payload, ${ts("created_at")} AS c, ${ts("updated_at")} AS u, is_deleted, ${ts("deleted_by")} AS d
       FROM resource_history ORDER BY identifier, version`,
  );
  const { rows: patients } = await db.query(
    `SELECT identifier, datasource_id, encode(uid_hash, 'hex') AS h, key_chain, ${ts("registered_at")} AS r FROM registry_patients ORDER BY identifier`,
  );
  const { rows: studies } = await db.query(
    `SELECT identifier, patient_identifier, encode(uid_hash, 'hex') AS h, key_chain, ${ts("registered_at")} AS r FROM registry_studies ORDER BY identifier`,
  );
  const { rows: keys } = await db.query(
    `SELECT key_id, encode(fingerprint, 'hex') AS f FROM registry_keys ORDER BY key_id`,
  );
  const { rows: chains } = await db.query("SELECT chain, key_ids FROM registry_key_chains ORDER BY chain");
  const { rows: clock } = await db.query(`SELECT ${ts("last")} AS last FROM clock`);
  return { versions, patients, studies, keys, chains, clock };
}

/** Reads of every identifier at every stamp of the history (and now). */
async function readsAtEveryStamp(db: Db): Promise<unknown[]> {
  const { rows: ids } = await db.query<{ identifier: string }>("SELECT identifier FROM resources ORDER BY identifier");
  const { rows: stamps } = await db.query<{ at: string }>(
    `SELECT DISTINCT ${ts("tx_from")} AS at FROM resource_history ORDER BY 1`,
  );
  const identifiers = ids.map((r) => r.identifier);
  const out: unknown[] = [await readResources(db, ALL_GRANTS, identifiers)];
  for (const { at } of stamps) out.push(await readResources(db, ALL_GRANTS, identifiers, { asOf: at }));
  return out;
}

/** A small deterministic generator (the history must be the same on every run). */
function prng(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return x / 2 ** 32;
  };
}

/**
 * A random history over a small tree: creates, updates, re-parents, cascading
 * deletes and restores, creates over tombstones. The store refuses some (a
 * cycle, a restore under a tombstoned parent): those write nothing, as in production.
 */
async function applyHistory(db: Db, seed: number, steps: number, prefix: string): Promise<void> {
  const random = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const ids = Array.from({ length: 12 }, (_, i) => `${prefix}-${i}`);
  const roots = ids.slice(0, 3);
  for (const id of ids) {
    try {
      await createResources(db, LOCAL_CALLER, [
        {
          identifier: id,
          payloadType: "annotation",
          parentIdentifier: roots.includes(id) ? null : pick(roots),
          payload: { label: id },
        },
      ]);
    } catch {
      // exists already (a second history over the same identifiers)
    }
  }
  for (let i = 0; i < steps; i++) {
    const id = pick(ids);
    const op = pick(["update", "update", "reparent", "delete", "restore", "create"] as const);
    try {
      if (op === "update")
        await updateResources(db, LOCAL_CALLER, [
          [id, { license: pick(["CC-BY", "CC0", null]), payload: { label: `${id}-${i}` } }],
        ]);
      else if (op === "reparent")
        await updateResources(db, LOCAL_CALLER, [[id, { parentIdentifier: pick([...roots, null]) }]]);
      else if (op === "delete") await deleteResources(db, LOCAL_CALLER, [id], { cascade: true });
      else if (op === "restore") await restoreResources(db, LOCAL_CALLER, [id], { cascade: true });
      else
        await createResources(db, LOCAL_CALLER, [
          { identifier: id, payloadType: "annotation", parentIdentifier: null, payload: { label: `new-${i}` } },
        ]);
    } catch {
      // refused: nothing written
    }
  }
}

async function registerSome(db: Db, secret: Buffer, from: number, to: number): Promise<void> {
  const registry = createRegistry({ db, keys: [{ id: "default", secret }] });
  for (let i = from; i < to; i++) {
    const patient = await registry.registerPatient(ALL_GRANTS, `ds-${i % 2}`, `MRN-${i}`);
    await registry.registerStudy(ALL_GRANTS, patient, `ACC-${i}`);
  }
}

const secretText = randomBytes(32).toString("base64url");
const configured = [{ id: "default", secret: secretText }];
const secret = Buffer.from(secretText, "utf8");

describe("dump and restore", () => {
  let source: Db;
  let full: Buffer;
  let pg: TestDatabase | undefined;

  beforeAll(async () => {
    source = await freshPglite();
    // As the service starts: the key's fingerprint and chain are recorded, then rows hashed under it.
    await loadRegistryKeys({ configured, db: source, dataDir: undefined });
    await applyHistory(source, 34, 60, "a");
    await registerSome(source, secret, 0, 3);
    full = await dumpBytes(source);
    if (await postgresReachable()) pg = await createTestDatabase();
    else if (REQUIRE_POSTGRES) throw new Error("PostgreSQL is required (REQUIRE_POSTGRES=1) but not reachable");
  });
  afterAll(async () => {
    await source?.close();
    await pg?.drop();
    await stores.removeAll();
  });

  it("writes a header, every version in order with its kind, the registry rows and a trailer", () => {
    const text = gunzipSync(full).toString("utf8");
    const lines = dumpRecords(text);
    expect(lines[0]).toMatchObject({
      record: "header",
      format: "resource-store-dump",
      format_version: DUMP_FORMAT_VERSION,
      since: null,
    });
    // Format version 2: every section opens with its line naming its columns, and each record is a list of values.
    const sections = text
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as unknown)
      .filter((l) => !Array.isArray(l) && (l as { record: string }).record === "section");
    expect(sections.map((s) => (s as { section: string }).section)).toEqual(
      (lines[0] as { sections: string[] }).sections,
    );
    expect(text).not.toMatch(/"record":"version"/);
    const trailer = lines[lines.length - 1]!;
    expect(trailer.record).toBe("trailer");
    const versions = lines.filter((l) => l.record === "version");
    expect((trailer.counts as Record<string, number>).version).toBe(versions.length);
    expect(new Set(versions.map((v) => v.kind))).toEqual(new Set(["created", "updated", "deleted", "restored"]));
    expect(lines.filter((l) => l.record === "registry_patient")).toHaveLength(3);
    expect(lines.filter((l) => l.record === "registry_study")).toHaveLength(3);
    expect(lines.filter((l) => l.record === "registry_key").map((l) => l.key_id)).toEqual(["default"]);
    expect(lines.filter((l) => l.record === "registry_key_chain").map((l) => l.chain)).toEqual(["default"]);
    // Hashes only: no external uid in the file.
    expect(gunzipSync(full).toString("utf8")).not.toMatch(/MRN-|ACC-/);
  });

  const targets: { name: string; open: () => Promise<Db | undefined> }[] = [
    { name: "PGlite", open: freshPglite },
    {
      name: "PostgreSQL",
      open: async () => {
        if (pg === undefined) return undefined;
        const db = await openDatabase({ databaseUrl: pg.url, poolSize: 2 });
        await migrate(db);
        return db;
      },
    },
  ];

  it.each(targets)(
    "restores into $name: the same versions, reads at every stamp and registry; then an incremental dump continues it",
    async ({ open }) => {
      const copy = await open();
      if (copy === undefined) return;
      try {
        const summary = await restoreFrom(copy, full);
        expect(summary.versions).toBeGreaterThan(40);
        expect(await contents(copy)).toEqual(await contents(source));
        expect(await readsAtEveryStamp(copy)).toEqual(await readsAtEveryStamp(source));
        // Dumped again from the copy (PostgreSQL: by binary COPY, every kind derived by the client), every line is the same.
        expect(body(await dumpBytes(copy))).toEqual(body(full));
        // The same key resolves the same uids on the copy.
        // The copy starts as the service would, with the same key: its fingerprint matches the restored one.
        await loadRegistryKeys({ configured, db: copy, dataDir: undefined });
        const onCopy = createRegistry({ db: copy, keys: [{ id: "default", secret }] });
        const onSource = createRegistry({ db: source, keys: [{ id: "default", secret }] });
        for (let i = 0; i < 3; i++)
          expect(await onCopy.resolvePatient(ALL_GRANTS, `ds-${i % 2}`, `MRN-${i}`)).toBe(
            await onSource.resolvePatient(ALL_GRANTS, `ds-${i % 2}`, `MRN-${i}`),
          );

        // A restored store is not empty: a full dump is refused, and nothing changes.
        const before = await contents(copy);
        await expect(
          restoreFrom(copy, full).catch((e: unknown) => Promise.reject(new Error(describeDumpError(e)))),
        ).rejects.toThrow(/not empty/);
        expect(await contents(copy)).toEqual(before);

        // More history on a second source built the same way, dumped since the full dump's until.
        const second = await freshPglite();
        try {
          await restoreFrom(second, full);
          const until = summary.until;
          await applyHistory(second, 35, 30, "a");
          await registerSome(second, secret, 3, 5);
          const increment = await dumpBytes(second, until);
          const header = JSON.parse(gunzipSync(increment).toString("utf8").split("\n")[0]!) as { since: string };
          expect(header.since).toBe(until);
          await restoreFrom(copy, increment);
          expect(await contents(copy)).toEqual(await contents(second));
          expect(await readsAtEveryStamp(copy)).toEqual(await readsAtEveryStamp(second));
          expect(body(await dumpBytes(copy, until))).toEqual(body(increment));
          // Again: the store has moved past the increment's `since`.
          await expect(
            restoreFrom(copy, increment).catch((e: unknown) => Promise.reject(new Error(describeDumpError(e)))),
          ).rejects.toThrow(/follows/);
        } finally {
          await second.close();
        }
      } finally {
        await copy.close();
      }
    },
  );

  const refusals: { name: string; bytes: () => Buffer; message: RegExp }[] = [
    { name: "a cut dump", bytes: () => full.subarray(0, Math.floor(full.length * 0.6)), message: /cut short/ },
    {
      name: "a dump cut at a line end (gzip intact, no trailer)",
      bytes: () => {
        const text = gunzipSync(full).toString("utf8").trimEnd().split("\n");
        return gzipSync(`${text.slice(0, -1).join("\n")}\n`);
      },
      message: /no trailer/,
    },
    {
      name: "a changed byte",
      // A valid value, so only the checksum can tell.
      bytes: () => gzipSync(gunzipSync(full).toString("utf8").replace(',"internal",', ',"public",')),
      message: /checksum/,
    },
    {
      name: "a newer format",
      bytes: () =>
        gzipSync(
          gunzipSync(full)
            .toString("utf8")
            .replace(`"format_version":${DUMP_FORMAT_VERSION}`, `"format_version":${DUMP_FORMAT_VERSION + 1}`),
        ),
      message: /newer resource-store/,
    },
    {
      name: "a section of columns this reader does not know",
      bytes: () =>
        gzipSync(gunzipSync(full).toString("utf8").replace('"columns":["identifier",', '"columns":["identity",')),
      message: /section versions declares/,
    },
    { name: "a file that is not a dump", bytes: () => gzipSync("hello\n"), message: /not a resource-store dump/ },
    // Each with its own reason (both were once "may be cut short").
    {
      name: "a file that is not gzip",
      bytes: () => Buffer.from('{"record":"header"}\n'),
      message: /^the file is not gzip/,
    },
    {
      name: "bytes after the dump's end",
      bytes: () => Buffer.concat([full, Buffer.from("appended by mistake")]),
      message: /^the file has bytes after the dump's end/,
    },
  ];

  it("refuses a cut dump, a changed byte, a newer format, a file that is not a dump or not gzip, and bytes after the end, and writes nothing", async () => {
    const target = await freshPglite();
    try {
      const empty = await contents(target);
      for (const { name, bytes, message } of refusals) {
        await expect(
          restoreFrom(target, bytes()).catch((e: unknown) => Promise.reject(new Error(describeDumpError(e)))),
          name,
        ).rejects.toThrow(message);
        expect(await contents(target), name).toEqual(empty);
      }
      // And the intact dump still restores into it.
      expect((await restoreFrom(target, full)).versions).toBeGreaterThan(40);
    } finally {
      await target.close();
    }
  });

  it("carries every byte of strings and payloads through COPY both ways, and PostgreSQL's dump equals PGlite's line for line", async () => {
    // Bytes COPY's text format escapes (tab, newline, carriage return, backslash), JSON escapes, a nested key named
    // payload, and a number with more digits than a double holds (only the stored text keeps them).
    const tricky = 'tab\there\nnew line\r\\back\\slash "quoted" \\" é ✓ 𝄞 \u0001';
    const src = await freshPglite();
    const copies: Db[] = [];
    try {
      await createResources(src, LOCAL_CALLER, [
        { identifier: "t-1", payloadType: "annotation", parentIdentifier: null, payload: { label: tricky } },
        { identifier: "t-2", payloadType: "annotation", parentIdentifier: "t-1", payload: { label: "plain" } },
      ]);
      await updateResources(src, LOCAL_CALLER, [["t-1", { license: tricky, payload: { label: `${tricky}!` } }]]);
      // Beyond what the schemas let a write hold, set in place: what the dump must carry is the stored text.
      const odd = JSON.stringify({ payload: { payload: [tricky, 1] }, 'a"payload":': 1 });
      await src.query("UPDATE resource_versions SET payload = payload || $1::jsonb WHERE identifier = 't-1'", [odd]);
      await src.query(
        `UPDATE resources SET payload = payload || '{"precise": 0.14285714285714285714, "big": 123456789012345678901234567890}'::jsonb WHERE identifier = 't-2'`,
      );
      const original = await dumpBytes(src);
      const payloads = (db: Db) =>
        db.query<{ p: string }>(
          "SELECT identifier || ' ' || version || ' ' || payload::text AS p FROM resource_history ORDER BY identifier, version",
        );

      const check = async (copy: Db): Promise<void> => {
        copies.push(copy);
        expect((await restoreFrom(copy, original)).versions).toBe(3);
        expect(await contents(copy)).toEqual(await contents(src));
        expect((await payloads(copy)).rows).toEqual((await payloads(src)).rows);
        // Dumped again from the copy (PostgreSQL: by COPY; PGlite: by cursor), every line is the same.
        expect(body(await dumpBytes(copy))).toEqual(body(original));
      };
      await check(await freshPglite());
      if (pg !== undefined) {
        const second = await createTestDatabase();
        try {
          const db = await openDatabase({ databaseUrl: second.url, poolSize: 2 });
          await migrate(db);
          await check(db);
          expect(
            (await db.query<{ p: string }>("SELECT payload->>'precise' AS p FROM resources WHERE identifier = 't-2'"))
              .rows[0]?.p,
          ).toBe("0.14285714285714285714");
          // PostgreSQL's dump restores into PGlite as well, and so does an incremental one after it.
          const back = await freshPglite();
          copies.push(back);
          const again = await dumpBytes(db);
          await restoreFrom(back, again);
          expect((await payloads(back)).rows).toEqual((await payloads(src)).rows);
          const until = (JSON.parse(gunzipSync(again).toString("utf8").split("\n")[0]!) as { until: string }).until;
          await updateResources(db, LOCAL_CALLER, [["t-1", { license: "CC0", payload: { label: "again" } }]]);
          await deleteResources(db, LOCAL_CALLER, ["t-1"], { cascade: true });
          await restoreFrom(back, await dumpBytes(db, until));
          expect(await contents(back)).toEqual(await contents(db));
        } finally {
          for (const c of copies.splice(0)) await c.close();
          await second.drop();
        }
      }
    } finally {
      for (const c of copies) await c.close();
      await src.close();
    }
  });
});

describe("a version-1 dump", () => {
  // Written by the version-1 writer (b1b0745) from an embedded store: every kind, a create over a tombstone,
  // strings with every byte COPY and JSON escape, a payload number past a double's digits, the registry.
  const v1 = readFileSync(new URL("./fixtures/dump-v1.ndjson", import.meta.url), "utf8");

  it("restores, and the store dumps it again in the current version with the same records and payload texts", async () => {
    const copy = await freshPglite();
    const again = await freshPglite();
    try {
      expect((JSON.parse(v1.split("\n")[0]!) as { format_version: number }).format_version).toBe(1);
      expect((await restoreFrom(copy, gzipSync(v1))).versions).toBe(11);
      expect(
        (await copy.query<{ p: string }>("SELECT payload->>'precise' AS p FROM resources WHERE identifier = 'v1-b'"))
          .rows[0]?.p,
      ).toBe("0.14285714285714285714");
      const v2 = gunzipSync(await dumpBytes(copy)).toString("utf8");
      expect((JSON.parse(v2.split("\n")[0]!) as { format_version: number }).format_version).toBe(DUMP_FORMAT_VERSION);
      // Every record the same, field by field (the header's stamps and the trailer's checksum differ), beside the
      // log of counts the restore started (format version 3: its own section and count).
      const records = dumpRecords(v2).slice(1, -1);
      expect(records.filter((r) => r.record !== "counts_log_row")).toEqual(dumpRecords(v1).slice(1, -1));
      const { counts_log_row: logged, ...counts } = dumpRecords(v2).at(-1)!.counts as Record<string, number>;
      expect(logged).toBe(records.filter((r) => r.record === "counts_log_row").length);
      expect(counts).toEqual(dumpRecords(v1).at(-1)!.counts);
      // The payloads' text as written, character for character.
      const texts = (lines: string[], of: (line: string) => string | undefined) => lines.map(of);
      const versionLines = (text: string, first: string) => text.split("\n").filter((l) => l.startsWith(first));
      expect(texts(versionLines(v2, '["v1-'), (l) => elementText(l, 14, true))).toEqual(
        texts(versionLines(v1, '{"record":"version"'), payloadText),
      );
      // And the version-2 dump restores to the same store.
      await restoreFrom(again, gzipSync(v2));
      expect(await contents(again)).toEqual(await contents(copy));
    } finally {
      await copy.close();
      await again.close();
    }
  });
});

describe("a dump from PostgreSQL whose file fails", () => {
  it("fails, and the connection its COPY held is not left in COPY mode", async () => {
    if (!(await postgresReachable())) {
      if (REQUIRE_POSTGRES) throw new Error("PostgreSQL is required (REQUIRE_POSTGRES=1) but not reachable");
      return;
    }
    const t = await createTestDatabase();
    // One connection: a statement after the failure needs the one the COPY had (or its replacement).
    const db = await openDatabase({ databaseUrl: t.url, poolSize: 1 });
    try {
      await migrate(db);
      // Payloads that compress little, so the COPY is still sending when the file fails.
      await db.query(
        `INSERT INTO resources (identifier, payload_type, access_level, payload, created_at, updated_at, version, actor)
         SELECT 'f-' || i, 'annotation', 'internal', jsonb_build_object('label', repeat(md5(i::text), 30)), now(), now(), 1, 'a'
           FROM generate_series(1, 20000) AS i`,
      );
      let written = 0;
      const failing = new Writable({
        write(chunk: Buffer, _encoding, callback) {
          written += chunk.length;
          callback(written > 64 * 1024 ? new Error("no space left on device") : null);
        },
      });
      await expect(writeDump(db, failing)).rejects.toThrow();
      expect((await db.query<{ n: string }>("SELECT count(*) AS n FROM resources")).rows[0]?.n).toBe("20000");
    } finally {
      await db.close();
      await t.drop();
    }
  }, 60_000);
});

describe("payloadText", () => {
  it("finds the top-level payload member as written, whatever its neighbours hold", () => {
    const cases: [string, string | undefined][] = [
      ['{"a":1,"payload":{"x":[1,{"payload":2}],"y":"}"},"b":2}', '{"x":[1,{"payload":2}],"y":"}"}'],
      ['{"s":"\\"payload\\":3","payload":1.50}', "1.50"],
      ['{"s":"back\\\\","payload":"v\\"w"}', '"v\\"w"'],
      ['{"payload" : [ ] , "z":null}', "[ ]"],
      ['{"payload":1,"payload":2}', "2"],
      ['{"nested":{"payload":1}}', undefined],
      ['{"pay\\u006coad":1}', undefined],
    ];
    for (const [line, want] of cases) {
      expect(payloadText(line), line).toBe(want);
      if (want !== undefined)
        expect(JSON.parse(want), line).toEqual((JSON.parse(line) as { payload: unknown }).payload);
    }
  });
});

describe("elementText", () => {
  it("finds an element of a JSON array line as written, whatever its neighbours hold", () => {
    const cases: [string, number, string | undefined][] = [
      ['["a",1,{"x":[1,{"y":2}],"z":"]"},"b"]', 2, '{"x":[1,{"y":2}],"z":"]"}'],
      ['["s\\"],",1.50]', 1, "1.50"],
      ['["back\\\\",["v\\"w",2]]', 1, '["v\\"w",2]'],
      ["[ [ ] , null ]", 0, "[ ]"],
      ["[1,2]", 1, "2"],
      ["[1,2]", 2, undefined],
      ['{"a":1}', 0, undefined],
    ];
    for (const [line, index, want] of cases) {
      expect(elementText(line, index), line).toBe(want);
      if (want !== undefined) {
        expect(JSON.parse(want), line).toEqual((JSON.parse(line) as unknown[])[index]);
        // The last element's text runs to the closing bracket, unscanned.
        if (index === (JSON.parse(line) as unknown[]).length - 1)
          expect(elementText(line, index, true), line).toBe(want);
      }
    }
  });
});
