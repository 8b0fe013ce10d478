// The dump's reader: restores a dump into a store (docs/dump-format.md,
// restore rules), parsing line by line and inserting in batches, all in one
// transaction that commits only once the trailer has checked out.
import type { Readable } from "node:stream";
import { createGunzip } from "node:zlib";
import type { Db, Queryable } from "./db.js";
import { pauseTreeCounts, rebuildTreeCounts } from "./tree-counts.js";
import { ts } from "./sql.js";
import { rebuildAttribution } from "./attribution.js";
import {
  checkHeader,
  COUNTS_LOG_COLUMNS,
  Digest,
  DumpError,
  kindOf,
  REGISTRY_ROWS,
  SECTION_COLUMNS,
  SECTIONS,
  shapeOf,
  type Kind,
  type Shape,
} from "./dump-format.js";
import { elementText, payloadText } from "./dump-lines.js";

const NEWLINE = 10;

export interface RestoreOptions {
  /** Versions an INSERT (default 5,000). */
  readonly batchSize?: number;
  /** Called after each batch with the versions loaded so far and the compressed bytes read. */
  readonly onProgress?: (versions: number, bytesRead: number) => void;
}

export interface RestoreSummary {
  readonly versions: number;
  readonly until: string;
  readonly since: string | null;
  /**
   * Whether the store took the dump's log of counts (format version 3, a
   * full dump): statistics at every earlier point then read the log as on
   * the source; otherwise the log starts again at `until`, and earlier
   * points read the history.
   */
  readonly countsLog: boolean;
}

interface VersionRecord {
  record: "version";
  identifier: string;
  version: number | string;
  from: string;
  to: string | null;
  kind: Kind;
  actor: string | null;
  payload_type: string;
  parent_identifier: string | null;
  license: string | null;
  access_level: string;
  derived_from: string[];
  payload: unknown;
  created_at: string;
  is_deleted: boolean;
  deleted_by: string | null;
}

/** A value in COPY's text format: `\\N` for null, else its text with backslash, tab, newline and carriage return escaped. */
function copyValue(v: unknown): string {
  if (v === null || v === undefined) return "\\N";
  if (typeof v === "object" || typeof v === "function")
    throw new DumpError(
      "a version field holds a list or an object where the format has one value; nothing was restored",
    );
  const s = typeof v === "string" ? v : typeof v === "symbol" ? v.toString() : `${v as number | boolean | bigint}`;
  return COPY_SPECIAL.test(s) ? s.replace(COPY_SPECIAL_ALL, (c) => COPY_ESCAPES[c]!) : s;
}
const COPY_SPECIAL = /[\\\t\n\r]/;
const COPY_SPECIAL_ALL = /[\\\t\n\r]/g;
const COPY_ESCAPES: Record<string, string> = { "\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r" };

/** A text[] literal of strings (then escaped for COPY). */
function arrayLiteral(xs: readonly unknown[]): string {
  return `{${xs.map((x) => `"${String(x).replace(/[\\"]/g, "\\$&")}"`).join(",")}}`;
}

/** A section of a version-2 dump being read: its records' type, its columns, where the payload is (-1: none). */
interface OpenSection {
  readonly section: string;
  readonly records: string;
  readonly columns: readonly string[];
  readonly payload: number;
  /** Where each column this reader knows (SECTION_COLUMNS' order) is in the records. */
  readonly order: readonly number[];
}

/** Checks a section line against the one before it and the columns this reader knows (docs/dump-format.md). */
function openSection(rec: Record<string, unknown>, lineNo: number, before: OpenSection | undefined): OpenSection {
  const name = rec.section;
  const spec = typeof name === "string" ? SECTION_COLUMNS.get(name) : undefined;
  if (typeof name !== "string" || spec === undefined) throw bad(lineNo, `unknown section ${JSON.stringify(name)}`);
  const order = (s: string | undefined) => (s === undefined ? -1 : (SECTIONS as readonly string[]).indexOf(s));
  if (order(name) <= order(before?.section)) throw bad(lineNo, `section ${name} out of order`);
  const columns = rec.columns;
  if (
    rec.records !== spec.records ||
    !Array.isArray(columns) ||
    columns.length !== spec.columns.length ||
    new Set(columns).size !== columns.length ||
    !spec.columns.every((c) => columns.includes(c))
  ) {
    throw bad(
      lineNo,
      `section ${name} declares records ${JSON.stringify(rec.records)} of columns ${JSON.stringify(columns)}; this resource-store reads ${spec.records} of ${spec.columns.join(", ")}`,
    );
  }
  return {
    section: name,
    records: spec.records,
    columns: columns as string[],
    payload: columns.indexOf("payload"),
    order: spec.columns.map((c) => columns.indexOf(c)),
  };
}

function bad(line: number, what: string): DumpError {
  return new DumpError(
    `line ${line}: ${what}; the dump is damaged or not one this resource-store wrote, nothing was restored`,
  );
}

/**
 * The columns a version row has in both tables, from payload_type to the
 * end, in COPY's text format: those of versionColumns / currentColumns after
 * their first ones (the current table has no period, its version is second).
 */
function commonFields(v: VersionRecord, text: string | undefined, lineNo: number, withActor: boolean): string {
  if (v.payload === undefined) throw bad(lineNo, `${v.identifier} version ${String(v.version)} has no payload`);
  if (v.derived_from !== null && v.derived_from !== undefined && !Array.isArray(v.derived_from))
    throw bad(lineNo, "derived_from is not a list");
  // A version-1 payload key written with escapes is not found by the scan: that line's payload is written again
  // (exact but for numbers past a double's digits).
  const payload = text ?? JSON.stringify(v.payload);
  const actor = withActor ? `\t${copyValue(v.actor)}` : "";
  return `${copyValue(v.payload_type)}\t${copyValue(v.parent_identifier)}\t${copyValue(v.license)}\t${copyValue(v.access_level)}\t${copyValue(
    arrayLiteral(v.derived_from ?? []),
  )}\t${copyValue(payload)}\t${copyValue(v.created_at)}\t${copyValue(v.from)}\t${copyValue(v.is_deleted)}\t${copyValue(v.deleted_by)}${actor}`;
}

/** How many rows the store holds that a full restore would have to merge with (it never does). */
async function storeContents(q: Queryable): Promise<{ resources: number; registry: number }> {
  const { rows } = await q.query<{ r: string; v: string; p: string; s: string }>(
    `SELECT (SELECT count(*) FROM resources) AS r, (SELECT count(*) FROM resource_versions) AS v,
            (SELECT count(*) FROM registry_patients) AS p, (SELECT count(*) FROM registry_studies) AS s`,
  );
  const row = rows[0]!;
  return { resources: Number(row.r) + Number(row.v), registry: Number(row.p) + Number(row.s) };
}

/**
 * Loads a dump into `db` (docs/dump-format.md, restore rules): a full dump
 * into an empty store, an incremental one into the store its `since` names.
 * One transaction: on any failure nothing is written.
 */
export async function restoreDump(db: Db, input: Readable, opts: RestoreOptions = {}): Promise<RestoreSummary> {
  const batchSize = opts.batchSize ?? 5000;
  let bytesRead = 0;
  input.on("data", (chunk: Buffer) => {
    bytesRead += chunk.length;
  });
  // Big pieces: fewer chunks to split into lines.
  const gunzip = createGunzip({ chunkSize: 256 * 1024 });
  // The file's first bytes: a data error in a file that does not start as gzip is not a dump at all, one in a
  // file that does is something after the dump's gzip stream (both were once reported as "may be cut short").
  let head = Buffer.alloc(0);
  input.on("data", (chunk: Buffer) => {
    if (head.length < 2) head = Buffer.concat([head, chunk.subarray(0, 2 - head.length)]);
  });
  const isGzip = () => head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b;
  const unreadable = (err: unknown): DumpError => {
    if (err instanceof DumpError) return err;
    const code = (err as NodeJS.ErrnoException | undefined)?.code;
    const why = err instanceof Error ? err.message : String(err);
    if (code === "Z_DATA_ERROR" && !isGzip())
      return new DumpError(`the file is not gzip (${why}), so not a resource-store dump; nothing was restored`);
    // After a gzip stream zlib reads what follows as the next one's header.
    if (code === "Z_DATA_ERROR" && /header check|unknown compression method/.test(why)) {
      return new DumpError(
        `the file has bytes after the dump's end (${why}): it is not one dump as written; nothing was restored`,
      );
    }
    if (code === "Z_DATA_ERROR") return new DumpError(`the dump is damaged (${why}); nothing was restored`);
    if (code === "Z_BUF_ERROR") return new DumpError(`the dump is cut short (${why}); nothing was restored`);
    return new DumpError(`the dump cannot be read (${why}); nothing was restored`);
  };
  // An error of the file reaches the chunk iterator through the decompressor, as the decompressor's own do.
  // (Not by racing each read against a promise that settles only on error: every race would stay attached
  // to it, holding its chunk, and the whole file would stay in memory.)
  input.once("error", (err) => gunzip.destroy(err));
  const chunks = input.pipe(gunzip)[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  // Lines split from the decompressed chunks, each with its bytes (newline included) for the digest.
  let lines: string[] = [];
  let raws: Buffer[] = [];
  let at = 0;
  let partial: Buffer[] = [];
  let ended = false;
  /** The bytes of the line nextLine returned last. */
  let lastRaw: Buffer = Buffer.alloc(0);
  const refill = async (): Promise<boolean> => {
    while (!ended) {
      let r: IteratorResult<Buffer>;
      try {
        r = await chunks.next();
      } catch (err) {
        throw unreadable(err);
      }
      lines = [];
      raws = [];
      at = 0;
      if (r.done === true) {
        ended = true;
        if (partial.length > 0) {
          // A last line without its newline.
          const tail = Buffer.concat(partial);
          partial = [];
          lines.push(tail.toString("utf8"));
          raws.push(Buffer.concat([tail, Buffer.from("\n")]));
          return true;
        }
        return false;
      }
      const buf = r.value;
      let start = 0;
      for (let i = buf.indexOf(NEWLINE); i !== -1; i = buf.indexOf(NEWLINE, start)) {
        const raw =
          partial.length > 0 ? Buffer.concat([...partial, buf.subarray(start, i + 1)]) : buf.subarray(start, i + 1);
        partial = [];
        lines.push(raw.toString("utf8", 0, raw.length - 1));
        raws.push(raw);
        start = i + 1;
      }
      if (start < buf.length) partial.push(buf.subarray(start));
      if (lines.length > 0) return true;
    }
    return false;
  };
  const nextLine = async (): Promise<string | undefined> => {
    if (at >= lines.length && !(await refill())) return undefined;
    lastRaw = raws[at]!;
    return lines[at++];
  };

  const first = await nextLine();
  if (first === undefined) throw new DumpError("the dump is empty");
  let parsed: unknown;
  try {
    parsed = JSON.parse(first);
  } catch {
    throw new DumpError("not a resource-store dump (its first line is not JSON)");
  }
  const header = checkHeader(parsed);
  const digest = new Digest();
  digest.add(lastRaw);

  // The batch before this one is loading while this one is parsed: the server works while this process reads.
  // On a failure the transaction ends only once that batch has: one statement at a time on its connection.
  let loading: Promise<void> = Promise.resolve();
  const settled = async (err: unknown): Promise<never> => {
    await loading.catch(() => {});
    throw err;
  };
  const summary = await db.transaction((tx) => load(tx).catch(settled));
  async function load(tx: Queryable): Promise<RestoreSummary> {
    const shape = await shapeOf(tx);
    // The tree counts (migration 20) are rebuilt once at the end, not kept row by row while loading.
    const treeCounts = shape.migrations.includes(20);
    if (treeCounts) await pauseTreeCounts(tx);
    let dropped: SecondaryIndex[] = [];
    // Nothing else writes while we load: the clock row is ours until commit.
    const { rows: clockRows } = await tx.query<{ last: string | null }>(
      `SELECT CASE WHEN last = '-infinity' THEN NULL ELSE ${ts("last")} END AS last FROM clock FOR UPDATE`,
    );
    const clock = clockRows[0]?.last ?? null;
    if (header.since === null) {
      const held = await storeContents(tx);
      if (held.resources > 0 || held.registry > 0) {
        throw new DumpError(
          `the store is not empty (${held.resources} versions of resources, ${held.registry} registry rows): a dump is restored only into an empty store`,
        );
      }
      dropped = await dropSecondaryIndexes(tx);
      // The datasource counts too are counted once over what was loaded (their triggers off for the load; the
      // store's table is this transaction's alone already, since the indexes above were dropped).
      if (shape.countsLog)
        await tx.query(`ALTER TABLE resources ${COUNTS_TRIGGERS.map((t) => `DISABLE TRIGGER ${t}`).join(", ")}`);
    } else {
      const { rows } = await tx.query<{ same: boolean }>(
        "SELECT $1::timestamptz IS NOT DISTINCT FROM $2::timestamptz AS same",
        [clock, header.since],
      );
      if (rows[0]?.same !== true) {
        throw new DumpError(
          `this incremental dump follows ${header.since}, but the store's last write is ${clock ?? "none"}: restore the dumps it follows first, in order`,
        );
      }
    }

    const counts: Record<string, number> = {
      version: 0,
      version_current: 0,
      registry_key: 0,
      registry_key_chain: 0,
      registry_patient: 0,
      registry_study: 0,
      counts_log_row: 0,
    };
    // Rows in COPY's text format, a table each; the closed versions' keys for an incremental dump.
    let currentRows = "";
    let supersededRows = "";
    let batched = 0;
    const closedIds: string[] = [];
    const closedVersions: string[] = [];
    const actor = shape.actor ? ["actor"] : [];
    const versionColumns = [
      "identifier",
      "version",
      "tx_from",
      "tx_to",
      "payload_type",
      "parent_identifier",
      "license",
      "access_level",
      "derived_from",
      "payload",
      "created_at",
      "updated_at",
      "is_deleted",
      "deleted_by",
      ...actor,
    ];
    const currentColumns = [
      "identifier",
      "version",
      "payload_type",
      "parent_identifier",
      "license",
      "access_level",
      "derived_from",
      "payload",
      "created_at",
      "updated_at",
      "is_deleted",
      "deleted_by",
      ...actor,
    ];
    const copyIn = tx.copyIn?.bind(tx);
    if (copyIn === undefined) throw new Error("restore needs a transaction that can COPY");
    // The dump's log of counts (format version 3) is taken into a store that keeps one, when the two logs meet:
    // a full restore takes the dump's whole; an incremental one the rows after its `since`, when the store's log
    // and the source's both answered at that point. Its rows wait in a temporary table until the versions are in.
    const carryLog =
      header.counts_log !== undefined &&
      shape.countsLog &&
      (header.since === null || (await logsMeet(tx, header.since, header.counts_log.since)));
    // A full restore loads the log's rows into the store's (empty, and its triggers off); an incremental one
    // stages them, and keeps what the store logged at the dump's `since`, its last write: the load's triggers
    // log at the clock, which is that point, over it.
    const logTable = header.since === null ? "datasource_counts_log" : "restore_counts_log";
    if (carryLog && header.since === null) await tx.query("DELETE FROM datasource_counts_log");
    if (carryLog && header.since !== null) {
      await tx.query("CREATE TEMPORARY TABLE restore_counts_log (LIKE datasource_counts_log) ON COMMIT DROP");
      await tx.query(
        `CREATE TEMPORARY TABLE restore_counts_log_at_since ON COMMIT DROP AS
           SELECT * FROM datasource_counts_log WHERE tx_from = $1::timestamptz`,
        [header.since],
      );
    }
    let logRows = "";
    let logBatched = 0;
    /** A record of the log, its values in the order of COUNTS_LOG_COLUMNS. */
    const logRecord = (row: unknown[], lineNo: number): void => {
      const [ds, pt, al, from, n, bytes, last] = row;
      if (
        typeof ds !== "string" ||
        typeof pt !== "string" ||
        typeof al !== "string" ||
        typeof from !== "string" ||
        !isCount(n) ||
        !isCount(bytes) ||
        (last !== null && typeof last !== "string")
      )
        throw bad(lineNo, "a counts_log_row record whose values are not those of its columns");
      counts.counts_log_row!++;
      if (carryLog) {
        logRows += `${copyValue(ds)}\t${copyValue(pt)}\t${copyValue(al)}\t${copyValue(from)}\t${String(n)}\t${String(bytes)}\t${copyValue(last)}\n`;
        logBatched++;
      }
    };
    // Like the versions: the batch before loads while this one is read.
    const flushLog = async (): Promise<void> => {
      await loading;
      if (logBatched === 0) return;
      const rows = logRows;
      logRows = "";
      logBatched = 0;
      loading = copyIn(logTable, [...COUNTS_LOG_COLUMNS], rows);
      loading.catch(() => {});
    };
    const flushVersions = async (): Promise<void> => {
      await loading;
      if (batched === 0) return;
      const versions = supersededRows;
      const currents = currentRows;
      const ids = closedIds.splice(0);
      const vs = closedVersions.splice(0);
      supersededRows = "";
      currentRows = "";
      batched = 0;
      loading = (async () => {
        // An incremental dump closes versions that were current in the store: they leave `resources` first.
        if (ids.length > 0) {
          await tx.query(
            `DELETE FROM resources r USING unnest($1::text[], $2::bigint[]) AS x(identifier, version)
              WHERE r.identifier = x.identifier AND r.version = x.version`,
            [ids, vs],
          );
        }
        if (versions !== "") await copyIn("resource_versions", versionColumns, versions);
        if (currents !== "") await copyIn("resources", currentColumns, currents);
      })();
      loading.catch(() => {});
      opts.onProgress?.(counts.version!, bytesRead);
    };

    // Per identifier: versions consecutive, contiguous periods, one current version, the last.
    let prev: VersionRecord | undefined;
    const endIdentifier = (lineNo: number): void => {
      if (prev !== undefined && header.since === null && prev.to !== null)
        throw bad(lineNo, `${prev.identifier} has no current version`);
    };
    const registryRows: Record<string, Record<string, unknown>[]> = {
      registry_key: [],
      registry_key_chain: [],
      registry_patient: [],
      registry_study: [],
    };
    let lineNo = 1;
    // A section is written in full before the next begins; what references it (studies their patients, rows their chains) comes later.
    let section: unknown = "version";
    const flushAll = async (): Promise<void> => {
      await flushVersions();
      await loading;
      for (const name of ["registry_key", "registry_key_chain", "registry_patient", "registry_study"])
        await flushRegistry(tx, shape, registryRows, name);
      await flushLog();
    };
    type Trailer = { counts?: Record<string, number>; sha256?: string };
    let trailer: Trailer | undefined;
    // Format version 2: the section whose records follow.
    let open: OpenSection | undefined;
    for (;;) {
      const line = await nextLine();
      if (line === undefined) break;
      lineNo++;
      if (trailer !== undefined) throw bad(lineNo, "a line after the trailer");
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        throw bad(lineNo, "not JSON");
      }
      let rec: { record?: unknown } & Record<string, unknown>;
      // The stored text of the payload, as the line holds it.
      let payload: string | undefined;
      if (Array.isArray(parsed)) {
        // Format version 2: a record of the open section, its values in the order of its columns.
        if (open === undefined)
          throw bad(
            lineNo,
            header.format_version < 2 ? "a list where a record was expected" : "a record before its section line",
          );
        if (parsed.length !== open.columns.length)
          throw bad(lineNo, `a ${open.records} record of ${parsed.length} values, not ${open.columns.length}`);
        if (open.records === "counts_log_row") {
          // The log's rows are many (one a group and write): taken from the list, no record built.
          digest.add(lastRaw);
          logRecord(
            open.order.map((i) => parsed[i] as unknown),
            lineNo,
          );
          if (logBatched >= batchSize) await flushLog();
          continue;
        }
        rec = { record: open.records };
        for (let i = 0; i < parsed.length; i++) rec[open.columns[i]!] = parsed[i];
        if (open.payload !== -1) payload = elementText(line, open.payload, open.payload === open.columns.length - 1);
      } else {
        rec = parsed as typeof rec;
        if (rec === null || typeof rec !== "object") throw bad(lineNo, "neither a record nor a list");
        if (rec.record === "trailer") {
          trailer = rec as Trailer;
          continue;
        }
        if (header.format_version >= 2) {
          if (rec.record !== "section") throw bad(lineNo, `unknown record ${JSON.stringify(rec.record)}`);
          digest.add(lastRaw);
          open = openSection(rec, lineNo, open);
          continue;
        }
        if (rec.record === "version") payload = payloadText(line);
      }
      digest.add(lastRaw);
      if (rec.record !== section) {
        await flushAll();
        section = rec.record;
      }
      if (rec.record === "version") {
        const v = rec as unknown as VersionRecord;
        if (
          typeof v.identifier !== "string" ||
          typeof v.from !== "string" ||
          (v.to !== null && typeof v.to !== "string")
        )
          throw bad(lineNo, "a version without identifier or period");
        if (shape.actor === false && v.actor !== null && v.actor !== undefined) {
          throw new DumpError(
            "the dump records actors and this store cannot hold them: upgrade resource-store before restoring",
          );
        }
        const n = Number(v.version);
        const same = prev?.identifier === v.identifier;
        if (!same) endIdentifier(lineNo);
        if (same) {
          if (n !== Number(prev!.version) + 1)
            throw bad(lineNo, `${v.identifier} version ${n} does not follow ${String(prev!.version)}`);
          if (prev!.to !== v.from)
            throw bad(
              lineNo,
              `${v.identifier} version ${n} does not begin where version ${String(prev!.version)} ended`,
            );
        } else if (prev !== undefined && Buffer.compare(Buffer.from(prev.identifier), Buffer.from(v.identifier)) >= 0) {
          throw bad(lineNo, "identifiers out of order");
        } else if (header.since === null && n !== 1) {
          throw bad(lineNo, `${v.identifier} begins at version ${n}`);
        }
        const before = same ? { isDeleted: prev!.is_deleted, createdAt: prev!.created_at } : undefined;
        if (header.since === null && kindOf(n, v.is_deleted, v.created_at, before) !== v.kind)
          throw bad(lineNo, `${v.identifier} version ${n} is not ${v.kind}`);
        const common = commonFields(v, payload, lineNo, shape.actor);
        if (v.to === null) {
          currentRows += `${copyValue(v.identifier)}\t${String(v.version)}\t${common}\n`;
          counts.version_current!++;
        } else {
          supersededRows += `${copyValue(v.identifier)}\t${String(v.version)}\t${copyValue(v.from)}\t${copyValue(v.to)}\t${common}\n`;
          if (header.since !== null) {
            closedIds.push(v.identifier);
            closedVersions.push(String(v.version));
          }
        }
        batched++;
        counts.version!++;
        prev = v;
        if (batched >= batchSize) await flushVersions();
      } else if (typeof rec.record === "string" && rec.record in registryRows) {
        registryRows[rec.record]!.push(rec);
        counts[rec.record]!++;
        if (registryRows[rec.record]!.length >= batchSize) await flushRegistry(tx, shape, registryRows, rec.record);
      } else {
        throw bad(lineNo, `unknown record ${JSON.stringify(rec.record)}`);
      }
    }
    endIdentifier(lineNo);
    if (trailer === undefined) throw new DumpError("the dump has no trailer: it was cut short; nothing was restored");
    for (const [name, n] of Object.entries(counts)) {
      // A dump before version 3 has no log of counts, nor its count.
      const expected =
        trailer.counts?.[name] ?? (name === "counts_log_row" && header.format_version < 3 ? 0 : undefined);
      if (expected !== n)
        throw new DumpError(
          `the dump's trailer counts ${trailer.counts?.[name] ?? 0} ${name} records, the file holds ${n}; nothing was restored`,
        );
    }
    if (trailer.sha256 !== digest.hex())
      throw new DumpError("the dump's checksum does not match its content; nothing was restored");
    await flushAll();
    await loading;
    // Access (docs/contract/18-access.md): versions loaded wholesale get their datasource attribution here
    // (before the indexes are built again: its update of every current row then maintains only the keys).
    await rebuildAttribution(tx);
    // Built once over the loaded rows, as a bulk load does, instead of kept row by row.
    for (const ix of dropped) await tx.query(ix.def);
    if (header.since === null && shape.countsLog) await recountDatasources(tx);
    if (header.until !== null) await tx.query("UPDATE clock SET last = $1::timestamptz", [header.until]);
    // The statistics' log of counts (migration 0023): the dump's, when it carries one that agrees with the counts
    // the load kept; else it starts again here, and points before it read the history. (Deriving it from the
    // history, datasource_counts_rebuild(), took the restore from 0.67 of pg_restore to 0.42.)
    const countsLog = carryLog && (await adoptCountsLog(tx, header.since, header.counts_log?.since ?? null));
    if (!countsLog && shape.countsLog) await tx.query("SELECT datasource_counts_restart()");
    // Derived data: the tree counts, once over what was loaded (the triggers were paused for the load).
    if (treeCounts) await rebuildTreeCounts(tx);
    return { versions: counts.version!, until: header.until ?? "", since: header.since, countsLog };
  }
  return summary;
}

/** The triggers that keep datasource_counts and its log (migration 23). */
const COUNTS_TRIGGERS = ["resources_counts_insert", "resources_counts_update", "resources_counts_delete"];

/**
 * The datasource counts of a full restore, counted once over the loaded
 * rows as migration 23 first counted them (its triggers were off for the
 * load), and the triggers on again. Nothing is logged here: the log is the
 * dump's, or starts again.
 */
async function recountDatasources(tx: Queryable): Promise<void> {
  await tx.query("DELETE FROM datasource_counts");
  await tx.query(
    `INSERT INTO datasource_counts (datasource_id, payload_type, access_level, resources, total_bytes, last_updated_at)
     SELECT datasource_id, payload_type, access_level, count(*),
            coalesce(sum((payload->>'size_bytes')::numeric) FILTER (WHERE payload_type = 'file'), 0), max(updated_at)
       FROM resources
      WHERE NOT is_deleted AND payload_type <> 'datasource' AND datasource_id IS NOT NULL
      GROUP BY datasource_id, payload_type, access_level`,
  );
  await tx.query(`ALTER TABLE resources ${COUNTS_TRIGGERS.map((t) => `ENABLE TRIGGER ${t}`).join(", ")}`);
}

/** A count of the log: a JSON integer, or its digits as text past 2^53. */
function isCount(v: unknown): boolean {
  return (typeof v === "number" && Number.isFinite(v)) || (typeof v === "string" && /^-?\d+(\.\d+)?$/.test(v));
}

/**
 * Whether an incremental dump's log of counts continues the store's: both
 * answered at the dump's `since` (the store's log began at or before it, and
 * the source's, `sourceSince`, too; null: at the first write).
 */
async function logsMeet(tx: Queryable, since: string, sourceSince: string | null): Promise<boolean> {
  const { rows } = await tx.query<{ ok: boolean }>(
    `SELECT (SELECT since FROM datasource_counts_since) <= $1::timestamptz
        AND coalesce($2::timestamptz, '-infinity') <= $1::timestamptz AS ok`,
    [since, sourceSince],
  );
  return rows[0]?.ok === true;
}

/**
 * The dump's log of counts becomes the store's, when the last values of
 * every group are then the counts the load kept from the versions
 * (datasource_counts). A full restore loaded it in place; an incremental
 * one staged it (restore_counts_log): its rows after `since` join the
 * store's, whose own at `since` are put back as they were before the load.
 * A log that disagrees is not taken (false, and nothing of it stays). Every
 * group the log holds gets its row of counts, 0 when only the past held it,
 * as migration 28 leaves them.
 */
async function adoptCountsLog(tx: Queryable, since: string | null, sourceSince: string | null): Promise<boolean> {
  if (since === null) {
    if (!(await logAgrees(tx))) {
      await tx.query("DELETE FROM datasource_counts_log");
      return false;
    }
    // The log begins where the source's did.
    await tx.query("UPDATE datasource_counts_since SET since = coalesce($1::timestamptz, '-infinity')", [sourceSince]);
  } else {
    await tx.query("SAVEPOINT restore_counts_log");
    await tx.query("DELETE FROM datasource_counts_log WHERE tx_from = $1::timestamptz", [since]);
    await tx.query("INSERT INTO datasource_counts_log SELECT * FROM restore_counts_log_at_since");
    const columns = COUNTS_LOG_COLUMNS.join(", ");
    await tx.query(`INSERT INTO datasource_counts_log (${columns}) SELECT ${columns} FROM restore_counts_log`);
    if (!(await logAgrees(tx))) {
      await tx.query("ROLLBACK TO SAVEPOINT restore_counts_log");
      return false;
    }
    await tx.query("RELEASE SAVEPOINT restore_counts_log");
  }
  await tx.query(
    `INSERT INTO datasource_counts (datasource_id, payload_type, access_level, resources, total_bytes, last_updated_at)
     SELECT DISTINCT datasource_id, payload_type, access_level, 0, 0, NULL::timestamptz FROM datasource_counts_log
     ON CONFLICT (datasource_id, payload_type, access_level) DO NOTHING`,
  );
  return true;
}

/** Whether the log's last row of every group holds the group's counts (a group without a row holds none). */
async function logAgrees(tx: Queryable): Promise<boolean> {
  const { rows } = await tx.query<{ n: string }>(
    `SELECT count(*) AS n
       FROM (SELECT DISTINCT ON (datasource_id, payload_type, access_level) *
               FROM datasource_counts_log ORDER BY datasource_id, payload_type, access_level, tx_from DESC) l
       FULL JOIN (SELECT * FROM datasource_counts WHERE resources <> 0) c USING (datasource_id, payload_type, access_level)
      WHERE coalesce(l.resources, 0) <> coalesce(c.resources, 0) OR coalesce(l.total_bytes, 0) <> coalesce(c.total_bytes, 0)
         OR (coalesce(l.resources, 0) <> 0 AND l.last_updated_at IS DISTINCT FROM c.last_updated_at)`,
  );
  return Number(rows[0]?.n) === 0;
}

interface SecondaryIndex {
  readonly name: string;
  readonly def: string;
}

/**
 * Drops the indexes of the two version tables that no constraint needs (a
 * full restore into an empty store, in its transaction, which puts them back
 * on any failure), and returns their definitions to build them again.
 */
async function dropSecondaryIndexes(tx: Queryable): Promise<SecondaryIndex[]> {
  const { rows } = await tx.query<SecondaryIndex>(
    `SELECT i.indexname AS name, i.indexdef AS def FROM pg_indexes i
      WHERE i.schemaname = current_schema() AND i.tablename IN ('resources', 'resource_versions')
        AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conname = i.indexname)
      ORDER BY i.indexname`,
  );
  for (const ix of rows) await tx.query(`DROP INDEX ${quoteIdent(ix.name)}`);
  return rows;
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

async function flushRegistry(
  tx: Queryable,
  shape: Shape,
  rows: Record<string, Record<string, unknown>[]>,
  name: string,
): Promise<void> {
  const batch = rows[name]!;
  if (batch.length === 0) return;
  const json = JSON.stringify(batch);
  const k = shape.keyColumn;
  switch (name) {
    case "registry_key":
      if (!shape.registryKeys)
        throw new DumpError(
          "the dump holds registry key fingerprints and this store cannot keep them: upgrade resource-store before restoring",
        );
      await tx.query(
        `INSERT INTO registry_keys (key_id, fingerprint, recorded_at)
         SELECT x.key_id, decode(x.fingerprint, 'hex'), x.recorded_at FROM jsonb_to_recordset($1::text::jsonb) AS x(key_id text, fingerprint text, recorded_at timestamptz)
         ON CONFLICT (key_id) DO NOTHING`,
        [json],
      );
      {
        // A store that knows a key id with another key would hash and resolve differently from the source.
        const { rows: clash } = await tx.query<{ key_id: string }>(
          `SELECT k.key_id FROM registry_keys k JOIN jsonb_to_recordset($1::text::jsonb) AS x(key_id text, fingerprint text)
              ON x.key_id = k.key_id WHERE k.fingerprint <> decode(x.fingerprint, 'hex')`,
          [json],
        );
        if (clash.length > 0)
          throw new DumpError(
            `this store knows registry key ${clash[0]!.key_id} as another key than the dump's source; nothing was restored`,
          );
      }
      break;
    case "registry_key_chain":
      if (!shape.registryChains)
        throw new DumpError(
          "the dump holds registry key chains and this store cannot keep them: upgrade resource-store before restoring",
        );
      await tx.query(
        `INSERT INTO registry_key_chains (chain, key_ids)
         SELECT x.chain, x.key_ids FROM jsonb_to_recordset($1::text::jsonb) AS x(chain text, key_ids text[])
         ON CONFLICT (chain) DO UPDATE SET key_ids = coalesce(registry_key_chains.key_ids, excluded.key_ids)`,
        [json],
      );
      break;
    default: {
      // registry_patient, registry_study: one statement, each table's scope column.
      const t = REGISTRY_ROWS.find((r) => r.record === name);
      if (t === undefined) throw new Error(`no registry table for record ${name}`);
      await tx.query(
        `INSERT INTO ${t.table} (identifier, ${t.scope}, uid_hash, ${k}, registered_at)
         SELECT x.identifier, x.${t.scope}, decode(x.uid_hash, 'hex'), x.key_chain, x.registered_at
           FROM jsonb_to_recordset($1::text::jsonb) AS x(identifier text, ${t.scope} text, uid_hash text, key_chain text, registered_at timestamptz)
         ON CONFLICT (identifier) DO UPDATE SET uid_hash = excluded.uid_hash, ${k} = excluded.${k}`,
        [json],
      );
    }
  }
  batch.length = 0;
}
