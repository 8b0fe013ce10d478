// PostgreSQL's binary COPY format, read in one place: the header, each
// row's field count and its fields' lengths, the trailer (PostgreSQL's
// documentation of COPY, "Binary Format"). What the values mean is
// the caller's: the dump writes them as JSON (store/dump-encoder.ts), the
// parquet export cuts the stream into row groups (parquet/copy-rows.ts) and
// its workers build Arrow columns of them (parquet/copy-batch.ts).
//
// A leaf (no import): the encoder workers load it without the store. Plain
// byte reads, not a DataView: a reader is handed any Uint8Array or Buffer,
// and a view a chunk would cost more than the few reads a row makes.

/** The stream is not the binary COPY it should be (a wrong signature, a row of other fields, bytes after the trailer). */
export class CopyFormatError extends Error {}

/** "PGCOPY\n\377\r\n\0", then the flags and the header extension's length (4 bytes each). */
const SIGNATURE = [0x50, 0x47, 0x43, 0x4f, 0x50, 0x59, 0x0a, 0xff, 0x0d, 0x0a, 0x00];
/** The header without its extension. */
const COPY_HEADER_BYTES = SIGNATURE.length + 8;

/** A row reader's answer when the row is not whole in the bytes given (more must come). */
export const COPY_PARTIAL = -1;
/** A row reader's answer at the trailer (a field count of -1): the stream's end. */
export const COPY_TRAILER = -2;

/** The signed 32-bit big-endian integer at `p`. */
const int32 = (b: Uint8Array, p: number): number => (b[p]! << 24) | (b[p + 1]! << 16) | (b[p + 2]! << 8) | b[p + 3]!;

/**
 * Where the rows start: the offset after the header at the start of
 * `bytes[0, end)` and its extension, or COPY_PARTIAL when those bytes do
 * not hold it all yet. Throws when they do not start with the signature.
 */
export function copyHeaderEnd(bytes: Uint8Array, end: number): number {
  if (end < COPY_HEADER_BYTES) return COPY_PARTIAL;
  for (let i = 0; i < SIGNATURE.length; i++)
    if (bytes[i] !== SIGNATURE[i]) throw new CopyFormatError("not a binary COPY stream");
  const after = COPY_HEADER_BYTES + int32(bytes, SIGNATURE.length + 4);
  return end < after ? COPY_PARTIAL : after;
}

/** The field count at `p` (a row's start, before `end` - 2): COPY_TRAILER, or `fields`; throws for any other. */
function fieldCount(bytes: Uint8Array, p: number, fields: number): number {
  const count = (bytes[p]! << 8) | bytes[p + 1]!;
  if (count === fields) return count;
  if (count === 0xffff) return COPY_TRAILER;
  throw new CopyFormatError(`a COPY row has ${(count << 16) >> 16} fields, expected ${fields}`);
}

/**
 * The row that starts at `p` in `bytes[0, end)`, skipped: the offset after
 * it, COPY_PARTIAL when it is not whole before `end`, or COPY_TRAILER.
 * Throws when it has other than `fields` fields.
 */
export function skipCopyRow(bytes: Uint8Array, p: number, end: number, fields: number): number {
  if (p + 2 > end) return COPY_PARTIAL;
  if (fieldCount(bytes, p, fields) === COPY_TRAILER) return COPY_TRAILER;
  let q = p + 2;
  for (let f = 0; f < fields; f++) {
    if (q + 4 > end) return COPY_PARTIAL;
    const l = int32(bytes, q);
    q += 4 + (l > 0 ? l : 0);
    if (q > end) return COPY_PARTIAL;
  }
  return q;
}

/**
 * As skipCopyRow, and each field's place: its bytes start at `at[base + f]`
 * and are `len[base + f]` long, both -1 for a null. The arrays are written
 * also when the row turns out partial (their values then mean nothing).
 */
export function readCopyRow(
  bytes: Uint8Array,
  p: number,
  end: number,
  fields: number,
  at: Int32Array,
  len: Int32Array,
  base = 0,
): number {
  if (p + 2 > end) return COPY_PARTIAL;
  if (fieldCount(bytes, p, fields) === COPY_TRAILER) return COPY_TRAILER;
  let q = p + 2;
  for (let f = 0; f < fields; f++) {
    if (q + 4 > end) return COPY_PARTIAL;
    const l = int32(bytes, q);
    q += 4;
    if (l < 0) {
      at[base + f] = -1;
      len[base + f] = -1;
      continue;
    }
    if (q + l > end) return COPY_PARTIAL;
    at[base + f] = q;
    len[base + f] = l;
    q += l;
  }
  return q;
}
