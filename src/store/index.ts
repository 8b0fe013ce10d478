// The resource store: the data layer's public surface.
import { createResources } from "./create.js";
import type { Db } from "./db.js";
import { readResources } from "./read.js";
import { deleteResources, restoreResources } from "./tombstones.js";
import type { MutationResult, NewResource, ReadOptions, ResourcePatch, StoredResource } from "./types.js";
import { updateResources } from "./update.js";

export type { Db, OpenDatabaseOptions, PoolStats, Queryable } from "./db.js";
export { openDatabase } from "./db.js";
export { migrate } from "./migrate.js";
export { toServiceError } from "./db-errors.js";
export type { MutationResult, NewResource, ReadOptions, ResourcePatch, StoredResource } from "./types.js";

export interface ResourceStore {
  readonly db: Db;
  /** All or nothing; identifiers unique in the batch and not active. */
  create(items: readonly NewResource[]): Promise<MutationResult>;
  /** In input order, repeats repeated; missing and tombstoned identifiers skipped. */
  read(identifiers: readonly string[], options?: ReadOptions): Promise<StoredResource[]>;
  /** All or nothing; count = resources changed. */
  update(updates: Iterable<readonly [string, ResourcePatch]>): Promise<MutationResult>;
  /** count = resources newly tombstoned. */
  delete(identifiers: readonly string[], options?: { cascade?: boolean }): Promise<MutationResult>;
  /** count = resources restored. */
  restore(identifiers: readonly string[], options?: { cascade?: boolean }): Promise<MutationResult>;
}

/** A store over a migrated database (see migrate()). */
export function createResourceStore(db: Db): ResourceStore {
  return {
    db,
    create: (items) => createResources(db, items),
    read: (identifiers, options) => readResources(db, identifiers, options),
    update: (updates) => updateResources(db, updates),
    delete: (identifiers, options) => deleteResources(db, identifiers, options?.cascade ?? true),
    restore: (identifiers, options) => restoreResources(db, identifiers, options?.cascade ?? true),
  };
}
