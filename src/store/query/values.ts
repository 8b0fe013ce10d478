// Client values (proto3 JSON, from google.protobuf.Value) checked against a
// field's SQL type and turned into bind parameters. A value of the wrong
// type is invalid_argument; nothing here ever becomes SQL text.
import type { JsonValue } from "@bufbuild/protobuf";
import { invalidArgument } from "../../errors.js";
import { isCalendarDate, parseAsOf } from "../../time.js";
import type { QueryField, SqlType } from "./fields.js";

/** The PostgreSQL type a parameter of that field type is cast to. */
export const PARAM_CAST: Record<SqlType, string> = {
  text: "text",
  date: "text",
  int: "int4",
  bigint: "int8",
  float8: "float8",
  bool: "boolean",
  timestamptz: "timestamptz",
  text_list: "text",
  json_map: "jsonb",
};

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const DECIMAL = /^-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;

/** Returns the parameter for `value`, or throws invalid_argument naming the field. */
export function bindValue(field: QueryField, value: JsonValue | undefined): string | number | boolean {
  const bad = (want: string) =>
    invalidArgument(`filter on ${field.name}: value ${JSON.stringify(value ?? null)} is not ${want}`, "INVALID_QUERY");
  switch (field.type) {
    case "text":
    case "text_list":
      if (typeof value !== "string") throw bad("a string");
      if (value.includes("\u0000")) throw bad("a string without NUL characters");
      return value;
    case "date":
      if (typeof value !== "string" || !isCalendarDate(value)) throw bad("a calendar date YYYY-MM-DD");
      return value;
    case "int": {
      const n =
        typeof value === "number"
          ? value
          : typeof value === "string" && /^-?\d{1,10}$/.test(value)
            ? Number(value)
            : NaN;
      if (!Number.isInteger(n) || n < -2147483648 || n > 2147483647) throw bad("a 32-bit integer");
      return n;
    }
    case "bigint": {
      let b: bigint | undefined;
      if (typeof value === "number" && Number.isSafeInteger(value)) b = BigInt(value);
      else if (typeof value === "string" && /^-?\d{1,19}$/.test(value)) b = BigInt(value);
      if (b === undefined || b < INT64_MIN || b > INT64_MAX) throw bad("a 64-bit integer");
      return b.toString();
    }
    case "float8":
      if (typeof value === "number" && Number.isFinite(value)) return String(value);
      if (value === "NaN" || value === "Infinity" || value === "-Infinity") return value;
      if (typeof value === "string" && DECIMAL.test(value) && Number.isFinite(Number(value)))
        return String(Number(value));
      throw bad("a number");
    case "bool":
      if (typeof value !== "boolean") throw bad("a boolean");
      return value;
    case "timestamptz":
      if (typeof value !== "string") throw bad("an RFC 3339 timestamp");
      try {
        return parseAsOf(value);
      } catch {
        throw bad("an RFC 3339 timestamp");
      }
    case "json_map":
      throw bad("comparable");
  }
}
