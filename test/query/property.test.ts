// Random field names, ops and values (including SQL-looking text) never give
// anything but an answer or invalid_argument: no internal error, so no
// syntax error from the database, on either backend.
import fc from "fast-check";
import { Code, ConnectError } from "@connectrpc/connect";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { beforeAll, expect, it } from "vitest";
import { payloadTypeNames, payloadTypes } from "../../src/schema/payload-registry.js";
import { OPS, queryMetadataNames } from "../../src/store/index.js";
import { describeBackends, uid } from "../store/backends.js";
import { clients, type Clients } from "./harness.js";

const allFieldNames = [
  ...new Set([
    ...queryMetadataNames,
    ...[...payloadTypes.values()].flatMap((t) => t.fields.map((f) => f.name)),
    "children",
  ]),
];
const nasty = fc.constantFrom(
  "'; DROP TABLE resources; --",
  '"',
  "\\",
  "%_",
  "$1",
  "a'b",
  "\u00e9",
  "NaN",
  "Infinity",
  "2024-02-30",
  "2026-01-01T00:00:00Z",
  "9223372036854775808",
  "-1",
);
const name = fc.oneof(
  { weight: 12, arbitrary: fc.constantFrom(...allFieldNames) },
  { weight: 1, arbitrary: fc.string({ maxLength: 12 }) },
  { weight: 1, arbitrary: nasty },
);
const op = fc.oneof(
  { weight: 12, arbitrary: fc.constantFrom(...OPS) },
  { weight: 1, arbitrary: fc.string({ maxLength: 6 }) },
);
const scalar: fc.Arbitrary<JsonValue> = fc.oneof(
  fc.string({ maxLength: 10 }).filter((s) => !s.includes("\u0000")),
  nasty,
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.boolean(),
  fc.constant(null),
  fc.constantFrom(0, 2147483648, -2147483649, 1e300),
);
const value: fc.Arbitrary<JsonValue | undefined> = fc.oneof(
  { weight: 6, arbitrary: scalar },
  { weight: 2, arbitrary: fc.array(scalar, { maxLength: 3 }) },
  { weight: 2, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.dictionary(fc.string({ maxLength: 3 }), scalar, { maxKeys: 2 }) },
);

type Cond = { field: string; op: string; value?: ReturnType<typeof fromJson<typeof ValueSchema>>; any?: Cond[] };
const leaf: fc.Arbitrary<Cond> = fc.record({ field: name, op, value }).map(({ field, op, value }) => ({
  field,
  op,
  ...(value !== undefined ? { value: fromJson(ValueSchema, value) } : {}),
}));
const condition: fc.Arbitrary<Cond> = fc.oneof(
  { weight: 4, arbitrary: leaf },
  { weight: 1, arbitrary: fc.array(leaf, { minLength: 1, maxLength: 3 }).map((any) => ({ field: "", op: "", any })) },
);

const anyRequest = fc.record(
  {
    payloadType: fc.oneof(
      { weight: 12, arbitrary: fc.constantFrom(...payloadTypeNames) },
      { weight: 1, arbitrary: fc.string({ maxLength: 5 }) },
    ),
    filters: fc.array(condition, { maxLength: 2 }),
    sortBy: name,
    sortOrder: fc.constantFrom("asc", "DESC", "Desc", "desc", "sideways"),
    limit: fc.oneof(
      { weight: 8, arbitrary: fc.integer({ min: 1, max: 10_000 }) },
      { weight: 1, arbitrary: fc.integer({ min: -1, max: 10_001 }) },
    ),
    selectColumns: fc.array(name, { maxLength: 1 }),
    parentIdentifier: fc.oneof(fc.constant("p1"), nasty),
    includeIndirectParents: fc.boolean(),
  },
  { requiredKeys: [] },
);
// Well-formed requests (metadata fields with fitting ops, text values that may
// look like SQL), so that a fair share of the runs reaches the database
// whatever the seed: random requests alone are mostly refused up front.
const wellFormed = fc.record({
  payloadType: fc.constantFrom(...payloadTypeNames),
  filters: fc.array(
    fc
      .record({
        field: fc.constantFrom("identifier", "license", "parent_identifier"),
        op: fc.constantFrom("eq", "ne", "lt", "gte", "contains", "starts_with"),
        value: fc.oneof(
          fc.string({ maxLength: 8 }).filter((t) => !t.includes("\u0000")),
          nasty,
        ),
      })
      .map(({ field, op, value }) => ({ field, op, value: fromJson(ValueSchema, value) })),
    { maxLength: 2 },
  ),
  sortBy: fc.constantFrom("created_at", "identifier", "license", "version"),
  sortOrder: fc.constantFrom("asc", "DESC"),
  limit: fc.integer({ min: 1, max: 10_000 }),
});
const request = fc.oneof({ weight: 3, arbitrary: anyRequest }, { weight: 1, arbitrary: wellFormed });

describeBackends("query compiler properties", (backend) => {
  let c: Clients;
  beforeAll(async () => {
    c = clients(backend());
    const p = uid("prop");
    await c.resources.create({
      resources: [
        { identifier: `${p}-d`, license: "x", payload: { case: "datasource", value: { name: "n", country: "NL" } } },
        { identifier: `${p}-s`, parentIdentifier: `${p}-d`, payload: { case: "series", value: { seriesNumber: 3 } } },
        { identifier: `${p}-a`, payload: { case: "annotation", value: { label: "l", value: Number.NaN } } },
        { identifier: `${p}-f`, payload: { case: "file", value: { path: "s3://b/k", sizeBytes: 5n } } },
      ],
    });
  });

  it("answers or says invalid_argument, never anything else", async () => {
    let answered = 0;
    await fc.assert(
      fc.asyncProperty(request, async (req) => {
        for (const call of [() => c.query.query(req), () => c.query.count(req)]) {
          try {
            await call();
            answered += 1;
          } catch (err) {
            expect(err).toBeInstanceOf(ConnectError);
            expect((err as ConnectError).code, (err as ConnectError).message).toBe(Code.InvalidArgument);
          }
        }
      }),
      { numRuns: 400 },
    );
    // The generator must reach the database often enough for this to mean something.
    expect(answered).toBeGreaterThan(40);
  });
});
