// A full dump carries the log of counts (format version 3, docs/dump-format.md):
// after a restore, statistics at every earlier point read the log as on the
// source, O(groups), where they read every resource of the history at that
// point before (the log started again at the dump's `until`). A log that
// disagrees with the versions restored is not taken: the log starts again and
// the history answers, as for a dump of version 2.
import { gunzipSync, gzipSync } from "node:zlib";
import { Readable } from "node:stream";
import { expect, it } from "vitest";
import { ALL_GRANTS, LOCAL_CALLER, type Grants } from "../../src/access/index.js";
import { createResourceStore, datasourceStats, restoreDump, type Db } from "../../src/store/index.js";
import { describeFreshStores } from "../store/backends.js";
import { dumpToBuffer } from "../store/dump-support.js";
import { recording, type Recorded } from "../store/recording.js";

const CALLERS: Grants[] = [ALL_GRANTS, { datasources: new Set(["A"]), clearance: "internal" }];

/**
 * A history that moves, relabels, deletes and restores across two
 * datasources; the stamp of every write. `halfway` runs after the fourth.
 */
async function writeHistory(db: Db, halfway?: () => Promise<void>): Promise<string[]> {
  const store = createResourceStore(db);
  const file = (id: string, parent: string, size: number, level = "public") => ({
    identifier: id,
    payloadType: "file",
    parentIdentifier: parent,
    accessLevel: level,
    payload: { path: `s3://b/${id}`, size_bytes: String(size) },
  });
  const points: string[] = [];
  const write = async (op: () => Promise<{ at: string }>) => points.push((await op()).at);
  await write(() =>
    store.create(LOCAL_CALLER, [
      { identifier: "pa", payloadType: "patient", payload: { datasource_id: "A" } },
      { identifier: "pb", payloadType: "patient", accessLevel: "internal", payload: { datasource_id: "B" } },
      // A datasource id with what JSON and COPY escape (a backslash, quotes, a tab) and a character beyond ASCII.
      { identifier: "pw", payloadType: "patient", payload: { datasource_id: 'we\\ird "ds"\t\u2713' } },
      {
        identifier: "fw",
        payloadType: "file",
        parentIdentifier: "pw",
        payload: { path: "s3://b/fw", size_bytes: "7" },
      },
      { identifier: "sa", payloadType: "study", parentIdentifier: "pa", payload: {} },
      file("f1", "sa", 10),
      file("f2", "sa", 20, "internal"),
      file("f3", "pb", 40),
    ]),
  );
  await write(() => store.update(LOCAL_CALLER, [["f1", { payload: { size_bytes: "11" } }]]));
  await write(() => store.update(LOCAL_CALLER, [["sa", { parentIdentifier: "pb" }]]));
  await write(() => store.update(LOCAL_CALLER, [["f3", { accessLevel: "restricted" }]]));
  await halfway?.();
  await write(() => store.delete(LOCAL_CALLER, ["f2"]));
  await write(() => store.create(LOCAL_CALLER, [file("f4", "pa", 80)]));
  await write(() => store.update(LOCAL_CALLER, [["pb", { payload: { datasource_id: "A" } }]]));
  await write(() => store.restore(LOCAL_CALLER, ["f2"]));
  await write(() => store.delete(LOCAL_CALLER, ["pa"]));
  return points;
}

async function answers(db: Db, points: readonly string[]): Promise<unknown[]> {
  const out: unknown[] = [await datasourceStats(db, ALL_GRANTS, {})];
  for (const asOf of points) for (const g of CALLERS) out.push(await datasourceStats(db, g, { asOf }));
  return out;
}

/** Whether statistics at every point, for a caller who sees everything, read the history. */
async function readsHistory(db: Db, points: readonly string[]): Promise<boolean> {
  const sent: Recorded[] = [];
  for (const asOf of points) await datasourceStats(recording(db, sent), ALL_GRANTS, { asOf });
  expect(sent.length).toBeGreaterThan(0);
  return sent.some((r) => r.sql.includes("resource_history"));
}

const restore = (db: Db, bytes: Buffer) => restoreDump(db, Readable.from([bytes]));

const logRows = async (db: Db) =>
  (
    await db.query(
      `SELECT datasource_id, payload_type, access_level, tx_from::text, resources::text, total_bytes::text, last_updated_at::text
         FROM datasource_counts_log ORDER BY 1, 2, 3, 4`,
    )
  ).rows;

describeFreshStores("a dump's log of counts", (fresh) => {
  it("is restored with the versions: every earlier point answers from the log, as on the source", async () => {
    const source = await fresh();
    const points = await writeHistory(source);
    const expected = await answers(source, points);
    expect(JSON.stringify(expected)).toContain('"B"');
    const bytes = await dumpToBuffer(source, {});
    const header = JSON.parse(gunzipSync(bytes).toString("utf8").split("\n")[0]!) as Record<string, unknown>;
    expect(header.format_version).toBe(3);
    expect(header.counts_log).toEqual({ since: null });

    const copy = await fresh();
    const summary = await restore(copy, bytes);
    expect(summary.countsLog).toBe(true);
    expect(await logRows(copy)).toEqual(await logRows(source));
    expect(await answers(copy, points)).toEqual(expected);
    expect(await readsHistory(copy, points)).toBe(false);
    // The copy's dump carries the same log again.
    const again = await fresh();
    expect((await restore(again, await dumpToBuffer(copy, {}))).countsLog).toBe(true);
    expect(await logRows(again)).toEqual(await logRows(source));
    // Writes after the restore log on from the restored clock; the earlier points answer as before.
    await createResourceStore(copy).create(LOCAL_CALLER, [
      { identifier: "pc", payloadType: "patient", payload: { datasource_id: "A" } },
    ]);
    const after = await answers(copy, points);
    expect(after.slice(1)).toEqual(expected.slice(1));
    expect(after[0]).not.toEqual(expected[0]);
  });

  it("of an incremental dump continues the log a full one restored", async () => {
    const source = await fresh();
    const copy = await fresh();
    let until = "";
    const points = await writeHistory(source, async () => {
      const bytes = await dumpToBuffer(source, {});
      until = (JSON.parse(gunzipSync(bytes).toString("utf8").split("\n")[0]!) as { until: string }).until;
      expect((await restore(copy, bytes)).countsLog).toBe(true);
    });
    const expected = await answers(source, points);
    const increment = await dumpToBuffer(source, { since: until });
    const summary = await restore(copy, increment);
    expect(summary.since).toBe(until);
    expect(summary.countsLog).toBe(true);
    expect(await logRows(copy)).toEqual(await logRows(source));
    expect(await answers(copy, points)).toEqual(expected);
    expect(await readsHistory(copy, points)).toBe(false);
  });

  it("is not taken when it disagrees with the versions: the log starts again and the history answers", async () => {
    const source = await fresh();
    const points = await writeHistory(source);
    const expected = await answers(source, points);
    // A log whose last values are not what the versions hold (a source damaged, or a writer's bug).
    await source.query(
      `UPDATE datasource_counts_log l SET resources = l.resources + 1
          WHERE tx_from = (SELECT max(tx_from) FROM datasource_counts_log m WHERE m.datasource_id = l.datasource_id
                             AND m.payload_type = l.payload_type AND m.access_level = l.access_level)
            AND datasource_id = 'A' AND payload_type = 'file' AND access_level = 'public'`,
    );
    const copy = await fresh();
    const summary = await restore(copy, await dumpToBuffer(source, {}));
    expect(summary.countsLog).toBe(false);
    expect(await answers(copy, points)).toEqual(expected);
    expect(await readsHistory(copy, points)).toBe(true);
  });

  it("of a version-2 dump (none) starts again at its until, and the history answers before it", async () => {
    const source = await fresh();
    const points = await writeHistory(source);
    const expected = await answers(source, points);
    // The same dump as version 2 wrote it: no log section, no header field, no count.
    const lines = gunzipSync(await dumpToBuffer(source, {}))
      .toString("utf8")
      .trimEnd()
      .split("\n");
    const header = JSON.parse(lines[0]!) as Record<string, unknown>;
    header.format_version = 2;
    header.sections = (header.sections as string[]).filter((s) => s !== "counts_log");
    delete header.counts_log;
    const cut = lines.findIndex((l) => l.startsWith('{"record":"section","section":"counts_log"'));
    const kept = [JSON.stringify(header), ...lines.slice(1, cut)];
    const { createHash } = await import("node:crypto");
    const trailer = JSON.parse(lines.at(-1)!) as { counts: Record<string, number> };
    delete trailer.counts.counts_log_row;
    const text = `${kept.join("\n")}\n`;
    const sha256 = createHash("sha256").update(text).digest("hex");
    const v2 = gzipSync(`${text}${JSON.stringify({ record: "trailer", counts: trailer.counts, sha256 })}\n`);
    const copy = await fresh();
    const summary = await restore(copy, v2);
    expect(summary.countsLog).toBe(false);
    expect(await answers(copy, points)).toEqual(expected);
    expect(await readsHistory(copy, points)).toBe(true);
  });
});
