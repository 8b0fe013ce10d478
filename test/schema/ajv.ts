// A strict ajv for draft 2020-12 with the formats the schemas use.
import { Ajv2020 } from "ajv/dist/2020.js";
import type { Options } from "ajv";
import formatsModule from "ajv-formats";

// ajv-formats is CommonJS; under NodeNext its default import is module.exports,
// which carries the plugin again as `default`.
const addFormats = formatsModule.default;

export function strictAjv(options: Options = {}): Ajv2020 {
  const ajv = new Ajv2020({ strict: true, allErrors: true, ...options });
  addFormats(ajv);
  return ajv;
}
