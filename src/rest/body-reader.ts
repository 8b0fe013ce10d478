// Parses a JSON request body (read under the size limit by
// http/read-body.ts), with a bound on its nesting.
import { invalidArgument } from "../errors.js";

/**
 * Arrays and objects a request body may nest: far beyond any valid request
 * (MAX_FILTER_DEPTH any groups take two levels each), low enough that the
 * recursive decoders after this never run out of stack (docs/contract/16-limits.md).
 */
const MAX_JSON_NESTING = 256;

/** The deepest nesting of arrays/objects in a JSON text, measured without recursion; stops counting past `limit`. */
function jsonNesting(text: string, limit: number): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      depth++;
      if (depth > deepest) {
        deepest = depth;
        if (deepest > limit) return deepest;
      }
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return deepest;
}

/** Parses a body as JSON; an empty body is undefined (the rule's defaults apply). */
export function parseJsonBody(raw: Buffer): unknown {
  const text = raw.toString("utf8");
  if (text.trim() === "") return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text) as unknown;
  } catch (err) {
    const detail = err instanceof SyntaxError ? `: ${err.message}` : "";
    throw invalidArgument(`the request body is not valid JSON${detail}`, "MALFORMED_BODY");
  }
  if (jsonNesting(text, MAX_JSON_NESTING) > MAX_JSON_NESTING) {
    throw invalidArgument(
      `the request body nests arrays and objects deeper than ${MAX_JSON_NESTING} levels (filter groups nest at most MAX_FILTER_DEPTH)`,
    );
  }
  return parsed;
}
