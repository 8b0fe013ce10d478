import type { JsonObject } from "@bufbuild/protobuf";

/** A resource as the store keeps it; payload is the proto3 JSON of its payload message. */
export interface StoredResource {
  identifier: string;
  payloadType: string;
  parentIdentifier: string | null;
  license: string | null;
  accessLevel: string;
  derivedFrom: string[];
  payload: JsonObject;
  /** RFC 3339 UTC with microseconds. */
  createdAt: string;
  updatedAt: string;
  version: number;
  /** Active immediate children at the read point, oldest first; absent when excluded. */
  children?: string[];
}

export interface NewResource {
  identifier: string;
  payloadType: string;
  parentIdentifier?: string | null;
  license?: string | null;
  /** "internal" when absent. */
  accessLevel?: string;
  derivedFrom?: readonly string[];
  /** Flat payload fields, proto3 JSON values; null = unset. */
  payload: Readonly<Record<string, unknown>>;
  /**
   * The payload is toJson output of its typed message (proto field names,
   * canonical values), so only the value rules need checking.
   */
  canonicalPayload?: boolean;
}

/** A change to one resource: only the keys present change; null clears. */
export interface ResourcePatch {
  /** When given, must equal the stored payload type. */
  payloadType?: string;
  parentIdentifier?: string | null;
  license?: string | null;
  accessLevel?: string | null;
  /** Replaces the list. */
  derivedFrom?: readonly string[];
  /** Payload field changes against the stored type; null clears. */
  payload?: Readonly<Record<string, unknown>>;
  /** true tombstones (this resource only), false restores. */
  isDeleted?: boolean;
  /** Optimistic concurrency: the version the caller last saw; any other stored version refuses the whole batch. */
  expectedVersion?: number;
}

export interface ReadOptions {
  /** RFC 3339 read point, already checked (see rpc/as-of.ts); unset = now. */
  asOf?: string;
  excludeChildren?: boolean;
}

export interface MutationResult {
  /** Resources written (created, changed, tombstoned or restored). */
  count: number;
  /** The transaction's stamp: every version it wrote starts here. */
  at: string;
}
