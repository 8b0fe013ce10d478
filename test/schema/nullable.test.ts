// isNullable is remembered per field (reading an option decodes the field's
// options each time: 9-17 us, which the REST writer paid for every unset
// nullable field of every message). The remembered answer must be the
// option's, for every field of every message the service answers with.
import { getOption, hasOption, type DescMessage } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { nullable } from "../../gen/resourcestore/type/v1/options_pb.js";
import { TreeNodeSchema } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { QueryResponseSchema } from "../../gen/resourcestore/type/v1/query_pb.js";
import { isNullable } from "../../src/schema/payload-registry.js";
import { revisions } from "../../src/rpc/index.js";

function messages(): DescMessage[] {
  const seen = new Map<string, DescMessage>();
  const visit = (d: DescMessage): void => {
    if (seen.has(d.typeName)) return;
    seen.set(d.typeName, d);
    for (const f of d.fields) if (f.message) visit(f.message);
  };
  for (const rev of revisions)
    for (const svc of rev.services)
      for (const m of svc.methods) {
        visit(m.input);
        visit(m.output);
      }
  return [...seen.values()];
}

describe("isNullable", () => {
  it("answers the (nullable) option of the field, the first time and after", () => {
    expect(isNullable(TreeNodeSchema.field.parentIdentifier)).toBe(true);
    expect(isNullable(TreeNodeSchema.field.payload)).toBe(false);
    expect(isNullable(QueryResponseSchema.field.nextCursor)).toBe(true);
    let marked = 0;
    for (const desc of messages()) {
      for (const field of desc.fields) {
        const option = hasOption(field, nullable) && getOption(field, nullable);
        if (option) marked += 1;
        expect(isNullable(field), `${desc.typeName}.${field.name}`).toBe(option);
        expect(isNullable(field), `${desc.typeName}.${field.name}, again`).toBe(option);
      }
    }
    expect(marked).toBeGreaterThanOrEqual(5);
  });
});
