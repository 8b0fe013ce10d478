// The dump's line parsing that JSON.parse cannot do: the text of a record's
// payload as the line has it (docs/dump-format.md: the stored jsonb's own
// text, its numbers keeping their digits), found by a scan that skips
// strings whole.

/** The index of the quote that closes the JSON string opening at `open` in `line` (one preceded by an even run of backslashes), or -1. */
function closingQuote(line: string, open: number): number {
  let j = open;
  for (;;) {
    j = line.indexOf('"', j + 1);
    if (j === -1) return -1;
    let k = j - 1;
    while (line.charCodeAt(k) === 92) k--;
    if ((j - 1 - k) % 2 === 0) return j;
  }
}

/**
 * The text of the top-level member "payload" of a JSON object line, as it
 * is (the writer wrote the stored jsonb's own text: its numbers keep their
 * digits, which JSON.parse and JSON.stringify would not). Strings are
 * skipped whole by their quotes; the last member of that name wins, as in
 * JSON.parse. Undefined when the line names none (a key written with escapes).
 */
export function payloadText(line: string): string | undefined {
  let depth = 0;
  let start = -1;
  let found: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line.charCodeAt(i);
    if (c === 34) {
      const j = closingQuote(line, i);
      if (j === -1) return undefined;
      if (depth === 1 && start === -1 && j === i + 8 && line.startsWith('"payload"', i)) {
        let m = j + 1;
        while (m < line.length && line.charCodeAt(m) <= 32) m++;
        if (line.charCodeAt(m) === 58) {
          start = m + 1;
          i = m;
          continue;
        }
      }
      i = j;
    } else if (c === 123 || c === 91) {
      depth++;
    } else if (c === 125 || c === 93 || c === 44) {
      if (c !== 44) depth--;
      if (start !== -1 && (depth === 0 || (c === 44 && depth === 1))) {
        found = line.slice(start, i).trim();
        start = -1;
      }
    }
  }
  return found;
}

/**
 * The text of element `index` of a JSON array line, as it is (format
 * version 2: a record's payload, the stored jsonb's own text). Strings are
 * skipped whole by their quotes. The line must have parsed as an array: the
 * last element (`last`) then ends at its closing bracket, unscanned.
 * Undefined when the array has no such element.
 */
export function elementText(line: string, index: number, last = false): string | undefined {
  let depth = 0;
  let element = 0;
  let start = -1;
  for (let i = 0; i < line.length; i++) {
    const c = line.charCodeAt(i);
    if (c === 34) {
      const j = closingQuote(line, i);
      if (j === -1) return undefined;
      i = j;
    } else if (c === 91 || c === 123) {
      depth++;
      if (depth === 1) {
        if (c !== 91) return undefined;
        if (index === 0) start = i + 1;
      }
    } else if (c === 93 || c === 125) {
      depth--;
      if (depth === 0) return start === -1 ? undefined : line.slice(start, i).trim();
    } else if (c === 44 && depth === 1) {
      if (start !== -1) return line.slice(start, i).trim();
      if (++element === index) start = i + 1;
    }
    if (start !== -1 && last) {
      const end = line.lastIndexOf("]");
      return end < start ? undefined : line.slice(start, end).trim();
    }
  }
  return undefined;
}
