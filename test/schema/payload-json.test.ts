// The descriptor-planned payload JSON writer of the create path must write
// exactly what protobuf-es toJson writes (proto names, int64 as strings,
// implicit zero values and empty lists/maps left out, NaN/Infinity as
// strings), for every payload type: the samples, zero values, and a set of
// messages filled field by field with edge values of each kind.
import { create, fromJson, toBinary, toJson } from "@bufbuild/protobuf";
import type { JsonObject, JsonValue, Message } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { payloadJsonToMessage, payloadMessageToJson } from "../../src/schema/payload-json.js";
import { payloadTypes } from "../../src/schema/payload-registry.js";
import type { FieldInfo } from "../../src/schema/payload-registry.js";
import { validSamples } from "./samples.js";

/** Edge values of each kind, as proto3 JSON. */
function edgeValues(f: FieldInfo): unknown[] {
  switch (f.kind) {
    case "string":
      return ["", "x", "ünïcödé \u{1F600}", '"quoted"\n'];
    case "int32":
      return [0, 1, -1, 2147483647, -2147483648];
    case "int64":
      return ["0", "1", "-1", "9223372036854775807", "-9223372036854775808"];
    case "double":
      return [0, -0, 1.5, -2.25e-300, "NaN", "Infinity", "-Infinity"];
    case "bool":
      return [false, true];
    case "string_list":
      return [[], ["a"], ["", "b", "c"]];
    case "double_map":
      return [{}, { a: 1 }, { x: "NaN", y: "-Infinity", z: 0 }];
  }
}

function expectSame(typeName: string, msg: Message): void {
  const type = payloadTypes.get(typeName)!;
  const want = toJson(type.message, msg as never, { useProtoFieldName: true }) as JsonObject;
  expect(payloadMessageToJson(type, msg)).toStrictEqual(want);
}

describe("payloadMessageToJson", () => {
  for (const type of payloadTypes.values()) {
    it(`${type.name}: same JSON as toJson`, () => {
      expectSame(type.name, create(type.message));
      for (const sample of validSamples[type.name] ?? []) expectSame(type.name, fromJson(type.message, sample));
      for (const f of type.fields) {
        for (const v of edgeValues(f)) {
          const msg = fromJson(type.message, { [f.name]: v } as JsonObject);
          expectSame(type.name, msg);
        }
      }
      // Every field set at once, to its last edge value.
      const all: JsonObject = {};
      for (const f of type.fields) all[f.name] = edgeValues(f).at(-1) as JsonObject[string];
      expectSame(type.name, fromJson(type.message, all));
    });
  }
});

describe("payloadJsonToMessage", () => {
  /** Same message as fromJson (ignoring unknown fields): same fields set, same bytes. */
  function expectRead(typeName: string, json: JsonObject): void {
    const type = payloadTypes.get(typeName)!;
    const want = fromJson(type.message, json, { ignoreUnknownFields: true });
    const got = payloadJsonToMessage(type, json);
    expect(toJson(type.message, got as never, { useProtoFieldName: true })).toStrictEqual(
      toJson(type.message, want, { useProtoFieldName: true }),
    );
    expect(toBinary(type.message, got as never)).toStrictEqual(toBinary(type.message, want));
    // The same object too: the same properties present, the same prototype (it is built without create()).
    expect(got).toStrictEqual(want);
  }

  for (const type of payloadTypes.values()) {
    it(`${type.name}: the message fromJson reads, from stored (canonical) JSON`, () => {
      expectRead(type.name, {});
      for (const sample of validSamples[type.name] ?? []) {
        expectRead(
          type.name,
          toJson(type.message, fromJson(type.message, sample), { useProtoFieldName: true }) as JsonObject,
        );
      }
      for (const f of type.fields) {
        for (const v of edgeValues(f)) {
          const stored = toJson(type.message, fromJson(type.message, { [f.name]: v } as JsonObject), {
            useProtoFieldName: true,
          }) as JsonObject;
          expectRead(type.name, stored);
          // Zero values written out (an explicit field set to its zero value is stored that way).
          expectRead(type.name, { [f.name]: v } as JsonObject);
        }
      }
    });
  }

  it("gives every message lists and maps of its own", () => {
    for (const type of payloadTypes.values()) {
      const a = payloadJsonToMessage(type, {}) as unknown as Record<string, unknown>;
      const b = payloadJsonToMessage(type, {}) as unknown as Record<string, unknown>;
      for (const f of type.fields) {
        if (f.kind === "string_list" || f.kind === "double_map")
          expect(a[f.desc.localName], `${type.name}.${f.name}`).not.toBe(b[f.desc.localName]);
      }
    }
  });

  it("skips unknown keys and nulls, and reads non-canonical values as fromJson does", () => {
    for (const type of payloadTypes.values()) {
      const json: JsonObject = { no_such_field: 1 };
      for (const f of type.fields) {
        json[f.name] = null;
        expectRead(type.name, json);
        const alt: JsonValue | undefined =
          f.kind === "int64"
            ? 42
            : f.kind === "int32"
              ? "7"
              : f.kind === "double"
                ? "1.5"
                : f.kind === "double_map"
                  ? { a: "2" }
                  : undefined;
        if (alt !== undefined) expectRead(type.name, { [f.name]: alt });
      }
    }
  });
});
