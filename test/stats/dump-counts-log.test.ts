// A full dump carries the log of counts (format version 3, docs/dump-format.md):
// after a restore, statistics at every earlier point read the log as on the
// source, O(groups), where they read every resource of the history at that
// point before (the log started again at the dump's `until`). A log that
// disagrees with the versions restored is not taken: the log starts again and
// the history answers, as for a dump of version 2.
import { createHash } from "node:crypto";
import { gunzipSync, gzipSync } from "node:zlib";
import { Readable } from "node:stream";
import { expect, it } from "vitest";
import { ALL_GRANTS, LOCAL_CALLER } from "../../src/access/index.js";
import { createResourceStore, datasourceStats, restoreDump, type Db } from "../../src/store/index.js";
import { describeFreshStores } from "../store/backends.js";
import { dumpToBuffer } from "../store/dump-support.js";
import { readsHistory, statsAtPoints, writeHistory } from "./history-support.js";

/** The statistics now, then at each point for each caller. */
async function answers(db: Db, points: readonly string[]): Promise<unknown[]> {
  return [await datasourceStats(db, ALL_GRANTS, {}), ...(await statsAtPoints(db, points))];
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
  /** A fresh copy restored from `bytes` does not take a log: it answers as the source, from the history. */
  const restoresWithoutLog = async (bytes: Buffer, points: readonly string[], expected: unknown[]) => {
    const copy = await fresh();
    expect((await restore(copy, bytes)).countsLog).toBe(false);
    expect(await answers(copy, points)).toEqual(expected);
    expect(await readsHistory(copy, points)).toBe(true);
  };
  /** `copy` restored from `bytes` takes the log: its rows are the source's, and every point answers from it, as on the source. */
  const restoresWithLog = async (
    copy: Db,
    bytes: Buffer,
    source: Db,
    points: readonly string[],
    expected: unknown[],
  ) => {
    const summary = await restore(copy, bytes);
    expect(summary.countsLog).toBe(true);
    expect(await logRows(copy)).toEqual(await logRows(source));
    expect(await answers(copy, points)).toEqual(expected);
    expect(await readsHistory(copy, points)).toBe(false);
    return summary;
  };

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
    await restoresWithLog(copy, bytes, source, points, expected);
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
    const summary = await restoresWithLog(copy, increment, source, points, expected);
    expect(summary.since).toBe(until);
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
    await restoresWithoutLog(await dumpToBuffer(source, {}), points, expected);
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
    const trailer = JSON.parse(lines.at(-1)!) as { counts: Record<string, number> };
    delete trailer.counts.counts_log_row;
    const text = `${kept.join("\n")}\n`;
    const sha256 = createHash("sha256").update(text).digest("hex");
    const v2 = gzipSync(`${text}${JSON.stringify({ record: "trailer", counts: trailer.counts, sha256 })}\n`);
    await restoresWithoutLog(v2, points, expected);
  });
});
