// The dump's writer: a whole store, or what changed after a `since`, as one
// gzip stream of lines (docs/dump-format.md). Memory stays flat: it reads
// through a server-side cursor (or a binary COPY on PostgreSQL) in one
// read-only snapshot and writes as it reads, the gzip stream's backpressure
// holding the reads.
import { Readable, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGzip } from "node:zlib";
import type { Db, Queryable } from "./db.js";
import { ts } from "./sql.js";
import { inlineParams } from "./copy-out.js";
import { parseAsOf } from "../time.js";
import {
  countsLogColumns,
  countsLogSql,
  Digest,
  DumpError,
  DUMP_FORMAT,
  DUMP_FORMAT_VERSION,
  REGISTRY_SECTIONS,
  SECTIONS,
  sectionLine,
  shapeOf,
  versionColumns,
  versionCopySql,
  versionLineSql,
} from "./dump-format.js";
import { RecordEncoder } from "./dump-encoder.js";

export interface DumpOptions {
  /** The `until` of an earlier dump: write only what changed after it (docs/dump-format.md, incremental dumps). */
  readonly since?: string;
  /** Rows a cursor fetch (default 10,000). */
  readonly batchSize?: number;
  /** `source.service_version` of the header. */
  readonly serviceVersion?: string;
  /** Called after each batch of versions with the number written so far. */
  readonly onVersions?: (written: number) => void;
}

export interface DumpSummary {
  readonly versions: number;
  readonly until: string;
  readonly counts: Readonly<Record<string, number>>;
}

/**
 * Rows of `sql` through a cursor of this transaction, `batch` at a time. The
 * next batch is fetched while the caller writes out this one: the database
 * reads and formats while this process builds lines and compresses.
 */
async function* cursorRows<R>(
  tx: Queryable,
  name: string,
  sql: string,
  params: readonly unknown[],
  batch: number,
): AsyncGenerator<R[]> {
  await tx.query(`DECLARE ${name} NO SCROLL CURSOR FOR ${sql}`, params);
  const fetch = (): Promise<R[]> => {
    const p = tx.query<R>(`FETCH ${batch} FROM ${name}`).then((r) => r.rows);
    // Awaited below, unless the reader stops first (then the transaction ends and this fails unseen).
    p.catch(() => {});
    return p;
  };
  let next = fetch();
  for (;;) {
    const rows = await next;
    if (rows.length === 0) break;
    const more = rows.length === batch;
    if (more) next = fetch();
    yield rows;
    if (!more) break;
  }
  await tx.query(`CLOSE ${name}`);
}

/**
 * A section's records a chunk at a time, with the count written so far: on
 * PostgreSQL the rows of a binary COPY of `copySql`, written out by
 * `encoder`; on PGlite the records `lineSql` builds (its column `line`),
 * through a cursor, one chunk a batch (the gzip stream and the digest take
 * one write each, not one a line).
 */
async function* sectionRecords(
  tx: Queryable,
  section: string,
  params: readonly unknown[],
  batch: number,
  source: { readonly encoder: RecordEncoder; readonly copySql: string; readonly lineSql: string },
): AsyncGenerator<{ text: string | Buffer; written: number }> {
  if (tx.copyTo !== undefined) {
    const { encoder } = source;
    for await (const chunk of tx.copyTo(
      `COPY (${inlineParams(source.copySql, params)}) TO STDOUT (FORMAT binary)`,
    ) as AsyncIterable<Buffer>) {
      const text = encoder.push(chunk);
      if (text !== undefined) yield { text, written: encoder.records };
    }
    if (!encoder.ended) throw new Error(`the COPY of the ${section} ended before its trailer`);
    return;
  }
  let written = 0;
  for await (const rows of cursorRows<{ line: string }>(tx, `dump_${section}`, source.lineSql, params, batch)) {
    let text = "";
    for (const r of rows) text += `${r.line}\n`;
    written += rows.length;
    yield { text, written };
  }
}

/** The lines of a dump, header to trailer, read in `tx` (one read-only snapshot). */
async function* dumpLines(
  tx: Queryable,
  db: Db,
  opts: DumpOptions,
  done: (s: DumpSummary) => void,
): AsyncGenerator<string | Buffer> {
  const batch = opts.batchSize ?? 10_000;
  const shape = await shapeOf(tx);
  const { rows: clock } = await tx.query<{ until: string | null; server: string }>(
    `SELECT CASE WHEN last = '-infinity' THEN NULL ELSE ${ts("last")} END AS until, version() AS server FROM clock`,
  );
  const until = clock[0]?.until ?? null;
  if (opts.since !== undefined && until !== null) {
    const { rows } = await tx.query<{ ok: boolean }>("SELECT $1::timestamptz <= $2::timestamptz AS ok", [
      opts.since,
      until,
    ]);
    if (rows[0]?.ok !== true) throw new DumpError(`since ${opts.since} is after the store's last write (${until})`);
  }
  const digest = new Digest();
  const counts: Record<string, number> = {
    version: 0,
    version_current: 0,
    registry_key: 0,
    registry_key_chain: 0,
    registry_patient: 0,
    registry_study: 0,
    counts_log_row: 0,
  };
  // The dump carries the log of counts (format version 3), and says where it begins.
  let countsLog: { since: string | null } | undefined;
  if (shape.countsLog) {
    const { rows } = await tx.query<{ since: string | null }>(
      `SELECT CASE WHEN since = '-infinity' THEN NULL ELSE ${ts("since")} END AS since FROM datasource_counts_since`,
    );
    if (rows.length === 1) countsLog = { since: rows[0]!.since };
  }
  const emit = <T extends string | Buffer>(line: T): T => {
    digest.add(line);
    return line;
  };
  yield emit(
    `${JSON.stringify({
      record: "header",
      format: DUMP_FORMAT,
      format_version: DUMP_FORMAT_VERSION,
      written_at: new Date().toISOString(),
      source: {
        backend: db.kind,
        server: clock[0]?.server ?? "",
        service_version: opts.serviceVersion ?? "",
        migrations: shape.migrations,
      },
      since: opts.since ?? null,
      until,
      sections: SECTIONS,
      ...(countsLog === undefined ? {} : { counts_log: countsLog }),
    })}\n`,
  );

  // --- versions: (identifier, version) order, both tables' primary keys.
  yield emit(sectionLine("versions"));
  const incremental = opts.since !== undefined;
  const actor = shape.actor ? "h.actor" : "NULL::text";
  const params = incremental ? [opts.since] : [];
  // The history, and for an incremental dump the version before each (its first version of an identifier may
  // follow one the dump does not hold): the history's row before it.
  const history = incremental
    ? `SELECT h.*, p.is_deleted AS prev_is_deleted, p.created_at AS prev_created_at
         FROM resource_history h LEFT JOIN resource_history p ON p.identifier = h.identifier AND p.version = h.version - 1
        WHERE h.tx_from > $1::timestamptz OR (h.tx_to > $1::timestamptz AND h.tx_to < 'infinity')`
    : "SELECT h.* FROM resource_history h";
  // Current versions are those of `resources` in the dump (their period began after `since`): counted apart,
  // and checked against the records written.
  const { rows: currentRows } = await tx.query<{ n: string }>(
    `SELECT count(*) AS n FROM resources${incremental ? " WHERE updated_at > $1::timestamptz" : ""}`,
    params,
  );
  counts.version_current = Number(currentRows[0]!.n);
  // PostgreSQL: the stored values by binary COPY (the server formats nothing, nor derives the kind: a window over
  // the whole history cost a quarter of its time). PGlite: the statement builds each record, its kind from a
  // window over the history's key order.
  const encoder = new RecordEncoder(versionColumns(actor), incremental);
  const source = incremental
    ? history
    : `SELECT h.*, lag(h.is_deleted) OVER w AS prev_is_deleted, lag(h.created_at) OVER w AS prev_created_at
         FROM resource_history h WINDOW w AS (PARTITION BY h.identifier ORDER BY h.version)`;
  for await (const { text, written } of sectionRecords(tx, "versions", params, batch, {
    encoder,
    copySql: `SELECT ${versionCopySql(actor, incremental)} FROM (${history}) h ORDER BY h.identifier, h.version`,
    lineSql: `SELECT ${versionLineSql(actor)} AS line FROM (${source}) h ORDER BY h.identifier, h.version`,
  })) {
    counts.version = written;
    yield emit(text);
    opts.onVersions?.(written);
  }
  if (tx.copyTo !== undefined && encoder.current !== counts.version_current)
    throw new Error(`the dump wrote ${encoder.current} current versions, the store holds ${counts.version_current}`);

  // --- the registry: one section a table.
  for (const r of REGISTRY_SECTIONS) {
    yield emit(sectionLine(r.section));
    const sql = r.sql(shape);
    if (sql === undefined) continue;
    for await (const rows of cursorRows<Record<string, unknown>>(tx, `dump_${r.section}`, sql, [], batch)) {
      let chunk = "";
      for (const row of rows) chunk += `${JSON.stringify(r.columns.map((c) => row[c]))}\n`;
      counts[r.records]! += rows.length;
      yield emit(chunk);
    }
  }

  // --- the log of counts: its rows in key order, values as the table holds them.
  yield emit(sectionLine("counts_log"));
  if (countsLog !== undefined) {
    for await (const { text, written } of sectionRecords(tx, "counts_log", params, batch, {
      encoder: new RecordEncoder(countsLogColumns, false),
      copySql: countsLogSql(incremental, "copy"),
      lineSql: countsLogSql(incremental, "line"),
    })) {
      counts.counts_log_row = written;
      yield emit(text);
    }
  }

  yield `${JSON.stringify({ record: "trailer", counts, sha256: digest.hex() })}\n`;
  done({ versions: counts.version!, until: until ?? "", counts });
}

/**
 * A `since` the dump can take: an RFC 3339 stamp with `Z` or an offset (the
 * `until` of an earlier dump). A stamp without a zone would be read in the
 * database session's time zone, and a word ("yesterday") was written into
 * the header as it was, dumping everything: both are refused.
 */
export function checkSince(since: string): void {
  try {
    parseAsOf(since);
  } catch {
    throw new DumpError(
      `since ${JSON.stringify(since)} is not an RFC 3339 timestamp with Z or an offset: give the \`until\` of an earlier dump (e.g. 2026-11-26T15:06:20.000001Z)`,
    );
  }
}

/** Writes a dump of `db` to `out` (a file stream; ended here). */
export async function writeDump(db: Db, out: Writable, opts: DumpOptions = {}): Promise<DumpSummary> {
  if (opts.since !== undefined) checkSince(opts.since);
  let summary: DumpSummary | undefined;
  await db.transaction(
    async (tx) => {
      await pipeline(Readable.from(dumpLines(tx, db, opts, (s) => (summary = s))), createGzip(), out);
    },
    { readOnlySnapshot: true },
  );
  if (summary === undefined) throw new Error("the dump ended without its trailer");
  return summary;
}
