import { describe, expect, it } from "vitest";
import { create, toBinary, toJson } from "@bufbuild/protobuf";
import { TreeNodeSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { treeNode } from "../../src/rpc/index.js";
import type { TreeNodeRow } from "../../src/store/index.js";

const rows: TreeNodeRow[] = [
  {
    identifier: "s-1",
    payloadType: "series",
    parentIdentifier: "stu-1",
    createdAt: "2026-01-02T03:04:05.000006Z",
    childCount: 3,
    descendantCount: 9,
  },
  {
    identifier: "p-1",
    payloadType: "patient",
    parentIdentifier: null,
    createdAt: "2026-01-02T03:04:05.000000Z",
    childCount: 0,
    descendantCount: 0,
  },
  {
    identifier: "f-1",
    payloadType: "file",
    parentIdentifier: "s-1",
    createdAt: "2026-01-02T03:04:05.123456Z",
    childCount: 0,
    descendantCount: 0,
    payload: { path: "a/b.dcm", size: "12", tags: ["x"] },
  },
];

describe("TreeNode messages built from rows", () => {
  for (const row of rows) {
    it(`is the message create() builds (${row.identifier})`, () => {
      const expected = create(TreeNodeSchema, {
        identifier: row.identifier,
        payloadType: row.payloadType,
        ...(row.parentIdentifier !== null ? { parentIdentifier: row.parentIdentifier } : {}),
        createdAt: row.createdAt,
        childCount: BigInt(row.childCount),
        descendantCount: BigInt(row.descendantCount),
        ...(row.payload !== undefined ? { payload: row.payload } : {}),
      });
      const got = treeNode(row);
      expect(got).toStrictEqual(expected);
      expect(toBinary(TreeNodeSchema, got)).toEqual(toBinary(TreeNodeSchema, expected));
      expect(toJson(TreeNodeSchema, got)).toEqual(toJson(TreeNodeSchema, expected));
    });
  }

  it("sets every implicit field the descriptor has", () => {
    const zero = create(TreeNodeSchema);
    const got = treeNode(rows[1]!);
    for (const key of Object.keys(zero)) expect(got, key).toHaveProperty(key);
  });
});
