// LineageService handlers for resourcestore.v1 (Children, Parents) and
// resourcestore.v2 (Parents only): one object serves both.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { ChildrenResponseSchema, ParentsResponseSchema } from "../../gen/resourcestore/type/v1/lineage_pb.js";
import type { TreeNode } from "../../gen/resourcestore/type/v1/resource_pb.js";
import type { LineageService } from "../../gen/resourcestore/v1/lineage_service_pb.js";
import type { Db, TreeNodeRow } from "../store/index.js";
import { listChildren, listParents, readerFor } from "../store/index.js";
import { callerOf } from "../auth/index.js";
import { optionalAsOf } from "./as-of.js";

export interface LineageServiceDeps {
  readonly db: Db;
  /** config MAX_CHILDREN (default 10,000). */
  readonly maxChildren?: number;
}

/**
 * The TreeNode message of a row, written out as create(TreeNodeSchema, ...)
 * would build it (a proto3 message is a plain object: its implicit fields
 * always set, its optional ones only when present) without the reflective
 * walk over the descriptor: a listing builds up to MAX_CHILDREN of them.
 */
export function treeNode(n: TreeNodeRow): TreeNode {
  const node: TreeNode = {
    $typeName: "resourcestore.type.v1.TreeNode",
    identifier: n.identifier,
    payloadType: n.payloadType,
    createdAt: n.createdAt,
    childCount: BigInt(n.childCount),
    descendantCount: BigInt(n.descendantCount),
  };
  if (n.parentIdentifier !== null) node.parentIdentifier = n.parentIdentifier;
  if (n.payload !== undefined) node.payload = n.payload;
  return node;
}

export function createLineageService(deps: LineageServiceDeps): ServiceImpl<typeof LineageService> {
  const { db } = deps;
  return {
    async children(req, ctx) {
      const { grants } = callerOf(ctx);
      const asOf = optionalAsOf(req.asOf);
      // Only an absent parent_identifier lists the roots; "" is malformed (as an empty as_of is).
      const nodes = await listChildren(await readerFor(db, asOf), grants, {
        parentIdentifier: req.parentIdentifier ?? null,
        withPayloads: req.withPayloads === true,
        ...(deps.maxChildren !== undefined ? { maxChildren: deps.maxChildren } : {}),
        ...(asOf !== undefined ? { asOf } : {}),
      });
      return create(ChildrenResponseSchema, { nodes: nodes.map(treeNode) });
    },
    async parents(req, ctx) {
      const { grants } = callerOf(ctx);
      const asOf = optionalAsOf(req.asOf);
      const identifiers = await listParents(
        await readerFor(db, asOf),
        grants,
        req.identifier,
        asOf !== undefined ? { asOf } : {},
      );
      return create(ParentsResponseSchema, { identifiers });
    },
  };
}
