// Migration 0006 moves the open versions out of resource_versions (the current
// version lives in `resources` alone). Data written before it must read the
// same after it: a history is written with the schema of migrations 1-5 and
// the writes of that time (every write closed the open versions of the rows it
// wrote and opened new ones), every read is taken, the database is migrated,
// and every read is taken again with the same statements.
import { create } from "@bufbuild/protobuf";
import { expect, it } from "vitest";
import { QueryRequestSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import {
  createResourceStore,
  listChildren,
  listParents,
  migrate,
  migrations,
  pageStatement,
  planQuery,
  ts,
  type Db,
  type ResourceStore,
} from "../../src/store/index.js";
import { describeFreshStores } from "./backends.js";
import { ds, fromMicros, micros, study } from "./helpers.js";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";

// Today's writes name their actor (migration 17) and keep attribution (migration 18); the
// schema of then had neither: give it the columns and table while the old history is written.
const ACCESS_SHIM = `ALTER TABLE resources ADD COLUMN actor text; ALTER TABLE resources ADD COLUMN datasource_id text COLLATE "C";
  CREATE TABLE resource_attribution (identifier text COLLATE "C", datasource_id text, tx_from timestamptz, tx_to timestamptz)`;
// ...and the tree counts the listings read (migration 20), kept by its triggers while the old history is written.
const TREE_SHIM = migrations.find((m) => m.name === "tree-counts")?.sql ?? "";
const DROP_ACCESS_SHIM = `DROP TABLE tree_counts; DROP FUNCTION tree_counts_insert, tree_counts_row, tree_counts_relabel CASCADE;
  DROP FUNCTION tree_counts_carry, tree_counts_shift, tree_counts_rebuild, tree_counts_enabled;
  DROP TABLE resource_attribution; ALTER TABLE resources DROP COLUMN datasource_id; ALTER TABLE resources DROP COLUMN actor`;

const BEFORE = migrations.filter((m) => m.id <= 5);

/** What every write did before migration 0006, after its rows were written. */
async function legacyVersions(db: Db): Promise<void> {
  await db.query(
    `UPDATE resource_versions v SET tx_to = c.last FROM clock c
      WHERE v.tx_to = 'infinity' AND v.identifier IN (SELECT identifier FROM resources WHERE updated_at = c.last)`,
  );
  await db.query(
    `INSERT INTO resource_versions (identifier, version, tx_from, payload_type, parent_identifier, license,
        access_level, derived_from, payload, created_at, updated_at, is_deleted, deleted_by)
     SELECT identifier, version, updated_at, payload_type, parent_identifier, license,
        access_level, derived_from, payload, created_at, updated_at, is_deleted, deleted_by
       FROM resources WHERE updated_at = (SELECT last FROM clock)`,
  );
}

const IDS = ["d1", "d2", "s1", "s2", "s3", "s4"];

/** Every read the store answers from the history, at each point, plus the current ones. */
async function allReads(db: Db, store: ResourceStore, points: readonly string[]): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const asOf of [undefined, ...points]) {
    const opt = asOf === undefined ? {} : { asOf };
    out.push(await store.read(ALL_GRANTS, IDS, opt));
    out.push(await store.read(ALL_GRANTS, IDS, { ...opt, excludeChildren: true }));
    out.push(await listChildren(db, ALL_GRANTS, { ...opt, withPayloads: true }));
    for (const parent of ["d1", "d2", "s1"]) {
      out.push(
        await listChildren(db, ALL_GRANTS, { ...opt, parentIdentifier: parent }).catch((e: unknown) => String(e)),
      );
    }
    for (const id of ["s2", "s3", "s4"])
      out.push(await listParents(db, ALL_GRANTS, id, opt).catch((e: unknown) => String(e)));
    for (const req of [{}, { payloadType: "study" }, { parentIdentifier: "d1", includeIndirectParents: true }]) {
      const point = asOf === undefined ? ({ kind: "now" } as const) : ({ kind: "as_of", asOf } as const);
      const st = pageStatement(planQuery(create(QueryRequestSchema, req)), point, ALL_GRANTS, {});
      out.push((await db.query(st.sql, st.params)).rows);
    }
  }
  return out;
}

async function everyVersion(db: Db, table: string): Promise<unknown[]> {
  const { rows } = await db.query(
    `SELECT identifier, version::text, ${ts("tx_from")} AS tx_from, CASE WHEN tx_to = 'infinity' THEN 'infinity' ELSE ${ts("tx_to")} END AS tx_to,
        payload_type, parent_identifier, license, access_level, derived_from, payload, ${ts("created_at")} AS created_at,
        ${ts("updated_at")} AS updated_at, is_deleted, ${ts("deleted_by")} AS deleted_by
       FROM ${table} ORDER BY identifier, version`,
  );
  return rows;
}

describeFreshStores("migration 0006: the history before and after", (fresh) => {
  it("reads every version, now and at every instant, as before", async () => {
    const db = await fresh(BEFORE);
    const store = createResourceStore(db);
    await db.exec(ACCESS_SHIM);
    await db.exec(TREE_SHIM);
    // The old history read through the new statements: the view over the old table.
    await db.exec("CREATE VIEW resource_history AS SELECT * FROM resource_versions");
    const stamps: string[] = [];
    const write = async (op: () => Promise<{ at: string }>) => {
      stamps.push((await op()).at);
      await legacyVersions(db);
    };
    await write(() => store.create(LOCAL_CALLER, [ds("d1"), ds("d2"), study("s1", "d1"), study("s2", "s1")]));
    await write(() => store.create(LOCAL_CALLER, [study("s3", "d1"), study("s4", "s3")]));
    await write(() =>
      store.update(LOCAL_CALLER, [
        ["s1", { license: "MIT" }],
        ["s3", { parentIdentifier: "d2" }],
      ]),
    );
    await write(() => store.delete(LOCAL_CALLER, ["s1"], { cascade: false }));
    await write(() => store.update(LOCAL_CALLER, [["d2", { payload: { name: "renamed" } }]]));
    await write(() => store.create(LOCAL_CALLER, [study("s1", "d2", { payload: { modality: "MR" } })])); // over the tombstone
    await write(() => store.delete(LOCAL_CALLER, ["d2"], { cascade: true }));
    await write(() => store.restore(LOCAL_CALLER, ["d2"], { cascade: true }));
    await write(() =>
      store.update(LOCAL_CALLER, [
        ["s4", { parentIdentifier: null }],
        ["s2", { license: "CC0" }],
      ]),
    );
    await write(() => store.delete(LOCAL_CALLER, ["s4"]));

    const points = [fromMicros(micros(stamps[0]!) - 1n)];
    for (const s of stamps) points.push(fromMicros(micros(s) - 1n), s);
    const before = await allReads(db, store, points);
    const versions = await everyVersion(db, "resource_versions");
    expect(versions.length).toBe(24);

    await db.exec("DROP VIEW resource_history");
    await db.exec(DROP_ACCESS_SHIM);
    expect(await migrate(db)).toEqual(migrations.filter((m) => m.id > 5).map((m) => m.id));
    // Only superseded versions stay in the table; the view yields every one as before.
    const { rows: open } = await db.query<{ n: string }>(
      "SELECT count(*)::text AS n FROM resource_versions WHERE tx_to = 'infinity'",
    );
    expect(open[0]?.n).toBe("0");
    expect(await everyVersion(db, "resource_history")).toEqual(versions);
    expect(await allReads(db, store, points)).toEqual(before);

    const { rows: actors } = await db.query<{ actor: string; n: string }>(
      "SELECT actor, count(*)::text AS n FROM resource_history GROUP BY actor",
    );
    expect(actors).toEqual([{ actor: "unknown", n: "24" }]);

    // Writes after the migration continue the same history, with their actor.
    const u = await store.update({ ...LOCAL_CALLER, actor: "after" }, [["d1", { license: "MIT" }]]);
    const all = await everyVersion(db, "resource_history");
    expect(all.length).toBe(25);
    const { rows: byActor } = await db.query<{ actor: string; version: string }>(
      "SELECT actor, version::text AS version FROM resource_history WHERE identifier = 'd1' ORDER BY version",
    );
    expect(byActor).toEqual([
      { actor: "unknown", version: "1" },
      { actor: "after", version: "2" },
    ]);
    expect(
      (await store.read(ALL_GRANTS, ["d1"], { asOf: fromMicros(micros(u.at) - 1n), excludeChildren: true }))[0],
    ).toMatchObject({ license: null, version: 1 });
    expect((await store.read(ALL_GRANTS, ["d1"], { asOf: u.at, excludeChildren: true }))[0]).toMatchObject({
      license: "MIT",
      version: 2,
    });
  }, 240_000);

  it("refuses to migrate a history whose open version does not match the current row", async () => {
    const db = await fresh(BEFORE);
    await db.exec(ACCESS_SHIM);
    await db.exec(TREE_SHIM);
    await createResourceStore(db).create(LOCAL_CALLER, [ds("d1")]);
    await db.exec(DROP_ACCESS_SHIM);
    await legacyVersions(db);
    await db.query("UPDATE resources SET version = 2");
    const err: unknown = await migrate(db).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(String((err as { cause?: unknown }).cause ?? err)).toMatch(/open version does not match/);
    const { rows } = await db.query<{ n: string }>("SELECT count(*)::text AS n FROM resource_versions");
    expect(rows[0]?.n).toBe("1");
  });
});
