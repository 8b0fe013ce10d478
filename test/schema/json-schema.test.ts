import { createClient, createRouterTransport } from "@connectrpc/connect";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SchemaService as SchemaServiceV1 } from "../../gen/resourcestore/v1/schema_service_pb.js";
import { SchemaService as SchemaServiceV2 } from "../../gen/resourcestore/v2/schema_service_pb.js";
import { createSchemaService } from "../../src/rpc/index.js";
import { INT64_STRING_PATTERN, payloadJsonSchemas } from "../../src/schema/json-schema.js";
import { payloadTypeNames, payloadTypes } from "../../src/schema/payload-registry.js";
import { strictAjv } from "./ajv.js";
import { invalidSamples, validSamples } from "./samples.js";

const schemas = payloadJsonSchemas();

function compile(payloadType: string) {
  const schema = schemas[payloadType];
  if (!schema) throw new Error(`no schema for ${payloadType}`);
  return strictAjv().compile(schema);
}

describe("payloadJsonSchemas", () => {
  it("has one schema per payload type of the registry", () => {
    expect(Object.keys(schemas)).toEqual([...payloadTypeNames]);
  });

  it("describes every payload field, marks the required ones and closes the object", () => {
    for (const [name, payload] of payloadTypes) {
      const schema = schemas[name] as Record<string, unknown>;
      expect(schema["$schema"]).toBe("https://json-schema.org/draft/2020-12/schema");
      expect(typeof schema["$id"]).toBe("string");
      expect(schema["title"]).toBe(name);
      expect(schema["additionalProperties"]).toBe(false);
      expect(Object.keys(schema["properties"] as object)).toEqual(payload.fields.map((f) => f.name));
      expect(schema["required"]).toEqual(payload.fields.filter((f) => f.required).map((f) => f.name));
    }
  });

  it("gives the enum-like fields their values and the checked strings their pattern or format", () => {
    const props = (t: string) => (schemas[t] as { properties: Record<string, Record<string, unknown>> }).properties;
    expect(props("patient")["sex"]?.["enum"]).toEqual(["female", "male", "other", "unknown"]);
    expect(props("artefact")["status"]?.["enum"]).toEqual(["pending", "running", "succeeded", "failed"]);
    expect(props("study")["study_date"]?.["format"]).toBe("date");
    expect(props("datasource")["country"]?.["pattern"]).toBe("^[A-Z]{2}$");
  });

  it("compiles every schema in ajv's strict 2020-12 mode, with distinct $ids", () => {
    const ajv = strictAjv();
    for (const schema of Object.values(schemas)) ajv.addSchema(schema);
    for (const name of payloadTypeNames) expect(typeof compile(name)).toBe("function");
  });

  it("has samples for every payload type", () => {
    for (const name of payloadTypeNames) {
      expect(validSamples[name]?.length, name).toBeGreaterThan(0);
      expect(invalidSamples[name]?.length, name).toBeGreaterThan(0);
    }
  });

  for (const name of Object.keys(validSamples)) {
    it(`accepts the valid ${name} samples`, () => {
      const validate = compile(name);
      for (const sample of validSamples[name] ?? []) {
        expect(validate(sample), `${JSON.stringify(sample)}: ${JSON.stringify(validate.errors)}`).toBe(true);
      }
    });
    it(`rejects the invalid ${name} samples`, () => {
      const validate = compile(name);
      for (const sample of invalidSamples[name] ?? []) {
        expect(validate(sample.payload), `${sample.why}: ${JSON.stringify(sample.payload)}`).toBe(false);
      }
    });
  }

  it("cannot be changed by a caller", () => {
    const schema = schemas["file"] as Record<string, unknown>;
    expect(() => {
      schema["additionalProperties"] = true;
    }).toThrow();
  });
});

describe("int64 strings", () => {
  const pattern = new RegExp(INT64_STRING_PATTERN, "u");
  const min = -(2n ** 63n);
  const max = 2n ** 63n - 1n;

  it("match exactly the decimal strings in the int64 range", () => {
    fc.assert(
      fc.property(fc.bigInt({ min, max }), fc.nat({ max: 3 }), (n, zeros) => {
        const digits = (n < 0n ? -n : n).toString();
        const text = `${n < 0n ? "-" : ""}${"0".repeat(zeros)}${digits}`;
        expect(pattern.test(text)).toBe(true);
      }),
    );
    fc.assert(
      fc.property(fc.bigInt({ min: max + 1n, max: max * 1000n }), fc.boolean(), (n, negative) => {
        const text = negative ? `-${(n + 1n).toString()}` : n.toString();
        expect(pattern.test(text)).toBe(false);
      }),
    );
  });

  it("reject what is not a decimal integer", () => {
    for (const text of ["", "-", "+5", " 12", "0x10", "1e3", "1.0", "12 "])
      expect(pattern.test(text), text).toBe(false);
  });
});

describe("SchemaService", () => {
  for (const [revision, service] of [
    ["v1", SchemaServiceV1],
    ["v2", SchemaServiceV2],
  ] as const) {
    it(`answers the payload schemas over ${revision}`, async () => {
      const transport = createRouterTransport((router) => {
        router.service(service, createSchemaService());
      });
      const client = createClient(service, transport);
      const response = await client.schemas({});
      expect(Object.keys(response.schemas)).toEqual(Object.keys(schemas));
      for (const [name, schema] of Object.entries(schemas)) {
        expect(response.schemas[name]).toEqual(schema);
      }
      const validate = strictAjv().compile(response.schemas["file"] ?? {});
      expect(validate({ path: "s3://b/k" })).toBe(true);
      expect(validate({ path: "b/k" })).toBe(false);
    });
  }
});
