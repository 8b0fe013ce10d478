// The resource store: the data layer's one public surface. Nothing outside
// src/store/ imports its other files (eslint: local/index-boundaries).
import type { Caller, Grants } from "../access/index.js";
import { createResources } from "./create.js";
import type { Db } from "./db.js";
import { readResources } from "./read.js";
import { readerFor } from "./replicas.js";
import { readHistory, type HistoryCursor, type HistoryOptions, type VersionPage } from "./history.js";
import { createCursorCodec, type CursorCodec } from "./query/index.js";
import { loadCursorSecret } from "./cursor-secret.js";
import { deleteResources, restoreResources, type TombstoneOptions } from "./tombstones.js";
import type { MutationResult, NewResource, ReadOptions, ResourcePatch, StoredResource } from "./types.js";
import { updateResources } from "./update.js";

// The database: two backends, one SQL text; capabilities say what each can do.
export type { Db, PoolStats, Queryable, ReadCounts, TransactionOptions } from "./db.js";
export { SNAPSHOT_BEGIN } from "./db.js";
export { openDatabase } from "./open-database.js";
export { correctModes, secureDataDir } from "./data-dir.js";
export { SESSION_OPTIONS } from "./postgres.js";
export { createStatementNames, MAX_PREPARED_PAGES } from "./prepared.js";
/** Reads on standbys: readerFor(db, point) is the Db a read at that point (as_of/pinned stamp; undefined = now) runs on. */
export { primaryWithStandbys, readerFor } from "./replicas.js";
export { toServiceError } from "./db-errors.js";
// Migrations.
export { migrate } from "./migrate.js";
export { migrations } from "./migrations/index.js";
// Resources: CRUD (createResourceStore below, or the functions themselves).
export type { NewResource, ResourcePatch, StoredResource } from "./types.js";
export { createResources } from "./create.js";
export { readResources } from "./read.js";
export { updateResources } from "./update.js";
export { deleteResources, restoreResources } from "./tombstones.js";
// Every version of one resource (docs/contract/19-audit-history.md).
export { readHistory, type HistoryVersion } from "./history.js";
/** The SQL that formats a timestamp column as the API writes it (for tests and benchmarks writing their own SQL). */
export { resourceColumns, ts } from "./sql.js";
// The query engine.
export * from "./query/index.js";
// Lineage: reads (the counts they give are kept by the writes: migrations/0020-tree-counts.ts).
export { listChildren, listParents, type TreeNodeRow } from "./lineage.js";
// Dump and restore of the whole history (docs/dump-format.md).
export {
  DUMP_FORMAT_VERSION,
  DumpError,
  checkSince,
  elementText,
  payloadText,
  restoreDump,
  writeDump,
} from "./dump.js";
// Patients and studies.
export {
  createRegistry,
  rederiveRegistry,
  rehashRegistry,
  RegistryRehashError,
  type RegisteredUid,
  type Registry,
} from "./registry.js";
// Access (docs/contract/18-access.md): the visibility predicate, for statements
// written outside these modules (the change feed, the history), and the
// object paths a caller may reach.
export { objectPathVisible } from "./objects.js";
// Artefacts and statistics.
export { latestArtefact } from "./artefacts.js";
export { datasourceStats } from "./stats.js";
// The cursor signing key.
export { loadCursorSecret } from "./cursor-secret.js";
// The registry's keys: loading, start-up checks, the key an earlier version kept in the database.
export { type RegistryKey } from "./registry-hash.js";
export {
  checkRegistryKeys,
  KEY_IN_DATABASE_MESSAGE,
  keyFingerprintMessage,
  keyNotConfiguredMessage,
  loadRegistryKeys,
  MISSING_KEY_MESSAGE,
  MOVED_KEY_GUIDANCE,
  moveRegistryKeyOut,
  REGISTRY_SECRET_FILE,
  RegistryKeyError,
  registryKeyStatus,
} from "./registry-keys.js";

/** How a delete or restore runs: cascade (default true), and the versions the caller expects (optimistic concurrency). */
interface TombstoneCallOptions {
  cascade?: boolean;
  expectedVersions?: ReadonlyMap<string, number>;
}

/**
 * Every method takes the caller's grants (docs/contract/18-access.md;
 * docs/access.md): reads answer only what they may see, writes may touch only
 * that. Writes take the whole caller: its actor goes into each version they
 * write (docs/contract/19-audit-history.md), in the statement that writes it.
 */
export interface ResourceStore {
  readonly db: Db;
  /** All or nothing; identifiers unique in the batch and not active. */
  create(caller: Caller, items: readonly NewResource[]): Promise<MutationResult>;
  /** In input order, repeats repeated; missing, tombstoned and invisible identifiers skipped. */
  read(grants: Grants, identifiers: readonly string[], options?: ReadOptions): Promise<StoredResource[]>;
  /** All or nothing; count = resources changed. */
  update(caller: Caller, updates: Iterable<readonly [string, ResourcePatch]>): Promise<MutationResult>;
  /** count = resources newly tombstoned. */
  delete(caller: Caller, identifiers: readonly string[], options?: TombstoneCallOptions): Promise<MutationResult>;
  /** count = resources restored. */
  restore(caller: Caller, identifiers: readonly string[], options?: TombstoneCallOptions): Promise<MutationResult>;
  /** One page of a resource's versions, oldest first, as `grants` may see them (404 when it may see none). */
  history(identifier: string, grants: Grants, options?: HistoryOptions): Promise<VersionPage>;
}

function tombstoneOptions(options: TombstoneCallOptions | undefined): TombstoneOptions {
  return {
    cascade: options?.cascade ?? true,
    ...(options?.expectedVersions !== undefined ? { expectedVersions: options.expectedVersions } : {}),
  };
}

/** A store over a migrated database (see migrate()). */
export function createResourceStore(
  db: Db,
  limits: { maxTreeDepth?: number; cursorSecret?: string | undefined } = {},
): ResourceStore {
  const depth = limits.maxTreeDepth;
  let codec: Promise<CursorCodec> | undefined;
  const historyCursor: HistoryCursor = () => {
    const loading = (codec ??= loadCursorSecret(db, limits.cursorSecret).then(createCursorCodec, (err: unknown) => {
      // A failed load is tried again by the next call.
      codec = undefined;
      throw err;
    }));
    return loading;
  };
  return {
    db,
    create: (caller, items) => createResources(db, caller, items, depth),
    read: async (grants, identifiers, options) =>
      readResources(await readerFor(db, options?.asOf), grants, identifiers, options),
    update: (caller, updates) => updateResources(db, caller, updates, depth),
    delete: (caller, identifiers, options) => deleteResources(db, caller, identifiers, tombstoneOptions(options)),
    restore: (caller, identifiers, options) =>
      restoreResources(db, caller, identifiers, tombstoneOptions(options), depth),
    // Now: a history read names no as_of, so it runs on the primary.
    history: (identifier, grants, options) => readHistory(db, historyCursor, identifier, grants, options),
  };
}

// The change feed (docs/contract/14-events.md) and the process's LISTEN connection.
export { EVENTS_CHANNEL, beforeStamp, createEventFeed, readHistoryPage } from "./events.js";
export type { EventFeed, EventFeedStats, EventFilter, EventMessage, ResourceEvent } from "./events.js";
export { createNotifications, type Notifications } from "./notifications.js";
