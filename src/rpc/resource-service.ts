// ResourceService handlers, shared by resourcestore.v1 and resourcestore.v2
// (the messages are the same; v1 simply has no Restore). Messages become
// store rows here: the payload oneof member is the payload type, and its
// message travels to the store as proto3 JSON with proto field names.
import { create } from "@bufbuild/protobuf";
import type { JsonObject } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  type Resource,
  type ResourceUpdate,
  type ResourceVersion,
  CreateResponseSchema,
  DeleteResponseSchema,
  HistoryResponseSchema,
  ReadResponseSchema,
  RestoreResponseSchema,
  UpdateResponseSchema,
} from "../../gen/resourcestore/type/v1/resource_pb.js";
import type { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { callerOf } from "../auth/index.js";
import { invalidArgument } from "../errors.js";
import { parseAsOf } from "../time.js";
import { metadataFieldByName, payloadTypeOf } from "../schema/payload-registry.js";
import type { NewResource, ResourcePatch, ResourceStore, StoredResource } from "../store/index.js";
import { payloadJsonToMessage, payloadMessageToJson } from "../schema/payload-json.js";
import { optionalAsOf } from "./as-of.js";

export interface ResourceServiceDeps {
  readonly store: ResourceStore;
  /** maxQueryLimit bounds a history page (MAX_QUERY_LIMIT). */
  readonly limits: { readonly maxBatchItems: number; readonly maxQueryLimit: number };
}

export function createResourceService(deps: ResourceServiceDeps): ServiceImpl<typeof ResourceService> {
  const { store, limits } = deps;
  const checkSize = (n: number, what: string) => {
    if (n > limits.maxBatchItems)
      throw invalidArgument(`too many ${what}: ${n} (at most ${limits.maxBatchItems})`, "BATCH_TOO_LARGE");
  };

  return {
    // Every write passes its caller down: its grants bound what it may touch,
    // its actor goes into each version it writes.
    create: async (req, ctx) => {
      const caller = callerOf(ctx);
      checkSize(req.resources.length, "resources");
      const { count } = await store.create(caller, req.resources.map(toNewResource));
      return create(CreateResponseSchema, { created: BigInt(count) });
    },
    read: async (req, ctx) => {
      const { grants } = callerOf(ctx);
      checkSize(req.identifiers.length, "identifiers");
      const asOf = optionalAsOf(req.asOf);
      const rows = await store.read(grants, req.identifiers, {
        ...(asOf !== undefined ? { asOf } : {}),
        excludeChildren: req.excludeChildren === true,
      });
      return create(ReadResponseSchema, { resources: rows.map(toResourceMessage) });
    },
    update: async (req, ctx) => {
      const caller = callerOf(ctx);
      const entries = Object.entries(req.updates);
      checkSize(entries.length, "updates");
      const { count } = await store.update(
        caller,
        entries.map(([id, u]) => [id, toResourcePatch(id, u)] as const),
      );
      return create(UpdateResponseSchema, { updated: BigInt(count) });
    },
    delete: async (req, ctx) => {
      const caller = callerOf(ctx);
      checkSize(req.identifiers.length, "identifiers");
      checkSize(Object.keys(req.expectedVersions).length, "expected_versions");
      const { count } = await store.delete(caller, req.identifiers, {
        cascade: req.cascade ?? true,
        expectedVersions: expectedVersions(req.expectedVersions),
      });
      return create(DeleteResponseSchema, { deleted: BigInt(count) });
    },
    restore: async (req, ctx) => {
      const caller = callerOf(ctx);
      checkSize(req.identifiers.length, "identifiers");
      checkSize(Object.keys(req.expectedVersions).length, "expected_versions");
      const { count } = await store.restore(caller, req.identifiers, {
        cascade: req.cascade ?? true,
        expectedVersions: expectedVersions(req.expectedVersions),
      });
      return create(RestoreResponseSchema, { restored: BigInt(count) });
    },
    history: async (req, ctx) => {
      const { grants } = callerOf(ctx);
      if (req.limit !== undefined && (req.limit < 1 || req.limit > limits.maxQueryLimit)) {
        throw invalidArgument(
          `limit must be between 1 and ${limits.maxQueryLimit}, got ${req.limit}`,
          "LIMIT_OUT_OF_RANGE",
        );
      }
      const page = await store.history(req.identifier, grants, {
        since: optionalStamp(req.since, "since"),
        until: optionalStamp(req.until, "until"),
        limit: req.limit,
        cursor: req.cursor,
      });
      return create(HistoryResponseSchema, {
        // Written out as create() would build them, without its reflective walk (100 a page).
        versions: page.versions.map((v): ResourceVersion => ({
          $typeName: "resourcestore.type.v1.ResourceVersion",
          version: BigInt(v.version),
          at: v.at,
          actor: v.actor,
          kind: v.kind,
          resource: toResourceMessage(v.resource),
        })),
        ...(page.nextCursor !== undefined ? { nextCursor: page.nextCursor } : {}),
      });
    },
  };
}

/** A since/until bound: RFC 3339 as as_of is (time.ts); absent = open. */
function optionalStamp(value: string | undefined, name: string): string | undefined {
  if (value === undefined) return undefined;
  try {
    return parseAsOf(value);
  } catch {
    throw invalidArgument(
      `${name} ${JSON.stringify(value.slice(0, 100))} is not an RFC 3339 timestamp with Z or an offset`,
    );
  }
}

/** expected_versions as the store takes them (int64 -> number; the store refuses what is not a version). */
function expectedVersions(map: { [id: string]: bigint }): Map<string, number> {
  return new Map(
    Object.entries(map).map(([id, v]) => [id, v > BigInt(Number.MAX_SAFE_INTEGER) || v < 0n ? -1 : Number(v)]),
  );
}

type PayloadOneof = Resource["payload"] | ResourceUpdate["payload"];

function payloadJson(payload: PayloadOneof): { type: string; json: JsonObject } | undefined {
  if (payload.case === undefined) return undefined;
  const type = payloadTypeOf(payload.case);
  if (!type) throw invalidArgument(`unknown payload_type ${payload.case}`);
  return { type: type.name, json: payloadMessageToJson(type, payload.value) };
}

function toNewResource(msg: Resource): NewResource {
  const payload = payloadJson(msg.payload);
  if (!payload) throw invalidArgument(`resource ${JSON.stringify(msg.identifier)} has no payload (payload_type)`);
  // created_at, updated_at, version and children are output only: ignored on input.
  return {
    identifier: msg.identifier,
    payloadType: payload.type,
    parentIdentifier: msg.parentIdentifier ?? null,
    license: msg.license ?? null,
    ...(msg.accessLevel !== undefined ? { accessLevel: msg.accessLevel } : {}),
    derivedFrom: msg.derivedFrom,
    payload: payload.json,
    canonicalPayload: true,
  };
}

/**
 * The Resource message of a stored row, written out as create(ResourceSchema,
 * ...) builds it (a proto3 message is a plain object: implicit fields always
 * set, optional ones only when present; see treeNode in lineage-service.ts)
 * without the reflective walk: every read, query page and listing builds one
 * per row. test/rpc/resource-message.test.ts compares both.
 */
export function toResourceMessage(row: StoredResource): Resource {
  const type = payloadTypeOf(row.payloadType);
  if (!type) throw new Error(`stored payload_type ${row.payloadType} is unknown`);
  const msg: Resource = {
    $typeName: "resourcestore.type.v1.Resource",
    identifier: row.identifier,
    derivedFrom: row.derivedFrom,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
    version: BigInt(row.version),
    children: row.children ?? [],
    payload: { case: type.name, value: payloadJsonToMessage(type, row.payload) } as Resource["payload"],
  };
  if (row.parentIdentifier !== null) msg.parentIdentifier = row.parentIdentifier;
  if (row.license !== null) msg.license = row.license;
  msg.accessLevel = row.accessLevel;
  return msg;
}

/**
 * A ResourceUpdate as a store patch. With an update_mask the named fields
 * change (unset = cleared); without one, the fields that are set change.
 * is_deleted goes by presence either way.
 */
function toResourcePatch(id: string, msg: ResourceUpdate): ResourcePatch {
  const patch: ResourcePatch = {};
  const member = payloadJson(msg.payload);
  if (member) patch.payloadType = member.type;
  const fromStruct: JsonObject = msg.payloadFields ?? {};
  if (member) {
    for (const k of Object.keys(fromStruct)) {
      if (k in member.json) throw invalidArgument(`${id}: field ${k} given twice (payload and payload_fields)`);
    }
  }
  const payload: Record<string, unknown> = {};
  const paths = msg.updateMask?.paths ?? [];
  if (paths.length > 0) {
    for (const path of paths) {
      switch (path) {
        case "parent_identifier":
          patch.parentIdentifier = msg.parentIdentifier ?? null;
          break;
        case "license":
          patch.license = msg.license ?? null;
          break;
        case "access_level":
          patch.accessLevel = msg.accessLevel ?? null;
          break;
        case "derived_from":
          patch.derivedFrom = msg.derivedFrom;
          break;
        case "is_deleted":
        case "expected_version":
        case "payload_type":
          break;
        default: {
          if (metadataFieldByName.has(path)) throw invalidArgument(`${id}: ${path} cannot be changed`);
          if (member && !payloadTypeOf(member.type)?.fieldByName.has(path)) {
            throw invalidArgument(`${id}: ${member.type} has no field ${JSON.stringify(path)}`, "UNKNOWN_FIELD");
          }
          payload[path] = member?.json[path] ?? fromStruct[path] ?? null;
        }
      }
    }
  } else {
    if (msg.parentIdentifier !== undefined) patch.parentIdentifier = msg.parentIdentifier;
    if (msg.license !== undefined) patch.license = msg.license;
    if (msg.accessLevel !== undefined) patch.accessLevel = msg.accessLevel;
    if (msg.derivedFrom.length > 0) patch.derivedFrom = msg.derivedFrom;
    Object.assign(payload, member?.json ?? {}, fromStruct);
  }
  if (Object.keys(payload).length > 0) patch.payload = payload;
  if (msg.isDeleted !== undefined) patch.isDeleted = msg.isDeleted;
  if (msg.expectedVersion !== undefined) {
    const v = msg.expectedVersion;
    patch.expectedVersion = v > BigInt(Number.MAX_SAFE_INTEGER) || v < 0n ? -1 : Number(v);
  }
  return patch;
}
