// The main thread's whole share of a COPY-fed export: PostgreSQL's binary
// COPY stream cut into row groups of whole rows. It reads only each row's
// field count and lengths; the values are read by the encoder workers
// (copy-batch.ts). Each group is gathered in one buffer of its own, which
// the caller may transfer to a worker whole and give back for a later group.

import { COPY_PARTIAL, COPY_TRAILER, CopyFormatError, copyHeaderEnd, skipCopyRow } from "../copy-binary.js";

export { CopyFormatError };

export interface CopyGroup {
  /**
   * Whole rows, back to back, as the stream had them (no header, no
   * trailer): a view into a buffer of its own (no other group's bytes), the
   * caller's from then on (it may transfer the whole buffer).
   */
  readonly data: Uint8Array;
  readonly rows: number;
}

/**
 * Where the splitter gets the buffer it gathers a group in, and gives back
 * one it outgrew (never one it handed out). The export recycles the buffers
 * its workers return, so a long export allocates no new ones.
 */
export interface GroupBuffers {
  /** A buffer of at least `least` bytes; a new one is made `size` bytes long (room for the next groups to grow). */
  alloc(least: number, size: number): Uint8Array;
  free(buffer: Uint8Array): void;
}

const fresh: GroupBuffers = {
  alloc: (_least, size) => new Uint8Array(size),
  free: () => undefined,
};

/** The smallest buffer taken. */
const FIRST_BYTES = 64 * 1024;
/** A group is expected to need this much more than the rows so far (or the group before) say. */
const MARGIN = 1 / 16;
/** And a new buffer is made this much larger, so that it still fits later groups when it comes back. */
const ROOM = 1 / 4;

export class CopyRowSplitter {
  // The group being gathered: its rows start at `start` (after the header in
  // the first one), whole rows end at `scan`, bytes received end at `used`.
  private buf: Uint8Array = new Uint8Array(0);
  private start = 0;
  private scan = 0;
  private used = 0;
  private header = false;
  private ended = false;
  private groupRows = 0;
  /** Bytes of the last group closed, the size the next one is expected to have. */
  private lastGroupBytes = 0;
  /** Rows seen so far. */
  rows = 0;

  constructor(
    private readonly fields: number,
    private readonly rowsPerGroup: number,
    private readonly buffers: GroupBuffers = fresh,
  ) {}

  /** Room for `more` bytes after `used`, moving the group to the start of a larger buffer when needed. */
  private reserve(more: number): void {
    const need = this.used - this.start + more;
    if (this.used + more <= this.buf.length) return;
    // Sized for the whole group as the rows read so far (or the group before) say, so it is
    // seldom outgrown: each buffer outgrown is a copy, and new memory the system has to map.
    const expected =
      this.groupRows > 0 ? ((this.scan - this.start) / this.groupRows) * this.rowsPerGroup + more : this.lastGroupBytes;
    const least = Math.max(
      need,
      Math.ceil(expected * (1 + MARGIN)),
      this.buf.length + (this.buf.length >> 2),
      FIRST_BYTES,
    );
    const next = this.buffers.alloc(least, Math.max(least, Math.ceil(expected * (1 + ROOM))));
    next.set(this.buf.subarray(this.start, this.used));
    if (this.buf.length > 0) this.buffers.free(this.buf);
    this.buf = next;
    this.used -= this.start;
    this.scan -= this.start;
    this.start = 0;
  }

  /** The group's rows, up to `end`; what follows (an incomplete row) starts the next group's buffer. */
  private close(end: number): CopyGroup {
    const group = { data: this.buf.subarray(this.start, end), rows: this.groupRows };
    this.lastGroupBytes = end - this.start;
    const rest = this.buf.subarray(end, this.used);
    const least = Math.max(rest.length, Math.ceil(this.lastGroupBytes * (1 + MARGIN)));
    this.buf = this.buffers.alloc(least, Math.max(least, Math.ceil(this.lastGroupBytes * (1 + ROOM))));
    this.buf.set(rest);
    this.used = rest.length;
    this.start = 0;
    this.scan = 0;
    this.groupRows = 0;
    return group;
  }

  /** The next piece of the stream (copied: the producer may reuse it); the groups of `rowsPerGroup` rows it completed. */
  push(chunk: Uint8Array): CopyGroup[] {
    if (this.ended) {
      if (chunk.length > 0) throw new CopyFormatError("bytes after the COPY trailer");
      return [];
    }
    if (chunk.length === 0) return [];
    this.reserve(chunk.length);
    this.buf.set(chunk, this.used);
    this.used += chunk.length;
    let end = this.used;
    let p = this.scan;
    if (!this.header) {
      const rowsStart = copyHeaderEnd(this.buf, end);
      if (rowsStart === COPY_PARTIAL) return [];
      p = rowsStart;
      this.start = p;
      this.scan = p;
      this.header = true;
    }
    const groups: CopyGroup[] = [];
    const n = this.fields;
    for (;;) {
      const q = skipCopyRow(this.buf, p, end, n);
      if (q === COPY_PARTIAL) break;
      if (q === COPY_TRAILER) {
        if (p + 2 !== end) throw new CopyFormatError("bytes after the COPY trailer");
        this.ended = true;
        break;
      }
      p = q;
      this.rows += 1;
      this.groupRows += 1;
      if (this.groupRows === this.rowsPerGroup) {
        groups.push(this.close(p));
        end = this.used;
        p = 0;
      }
    }
    this.scan = p;
    return groups;
  }

  /** The end of the stream: the last, partial group (undefined when it is empty). Throws when the trailer never came. */
  end(): CopyGroup | undefined {
    if (!this.ended) throw new CopyFormatError("the COPY stream ended without its trailer");
    if (this.groupRows === 0) return undefined;
    const group = { data: this.buf.subarray(this.start, this.scan), rows: this.groupRows };
    this.buf = new Uint8Array(0);
    this.used = this.start = this.scan = 0;
    this.groupRows = 0;
    return group;
  }
}
