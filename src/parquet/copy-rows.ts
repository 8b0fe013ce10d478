// The main thread's whole share of a COPY-fed export: PostgreSQL's binary
// COPY stream cut into row groups of whole rows. It reads only each row's
// field count and lengths; the values are read by the encoder workers
// (copy-batch.ts).

/** "PGCOPY\n\377\r\n\0", flags, header extension length. */
const SIGNATURE = [0x50, 0x47, 0x43, 0x4f, 0x50, 0x59, 0x0a, 0xff, 0x0d, 0x0a, 0x00];
const HEADER_BYTES = SIGNATURE.length + 8;

export interface CopyGroup {
  /** Whole rows, back to back, as the stream had them (no header, no trailer). */
  readonly data: Uint8Array;
  readonly rows: number;
}

export class CopyFormatError extends Error {}

export class CopyRowSplitter {
  private carry: Uint8Array = new Uint8Array(0);
  private header = false;
  private ended = false;
  private parts: Uint8Array[] = [];
  private partBytes = 0;
  private groupRows = 0;
  /** Rows seen so far. */
  rows = 0;

  constructor(
    private readonly fields: number,
    private readonly rowsPerGroup: number,
  ) {}

  private close(): CopyGroup {
    const data = new Uint8Array(this.partBytes);
    let at = 0;
    for (const p of this.parts) {
      data.set(p, at);
      at += p.length;
    }
    const group = { data, rows: this.groupRows };
    this.parts = [];
    this.partBytes = 0;
    this.groupRows = 0;
    return group;
  }

  private keep(part: Uint8Array): void {
    if (part.length === 0) return;
    this.parts.push(part);
    this.partBytes += part.length;
  }

  /** The next piece of the stream; the groups of `rowsPerGroup` rows it completed. */
  push(chunk: Uint8Array): CopyGroup[] {
    if (this.ended) {
      if (chunk.length > 0) throw new CopyFormatError("bytes after the COPY trailer");
      return [];
    }
    let buf = chunk;
    if (this.carry.length > 0) {
      buf = new Uint8Array(this.carry.length + chunk.length);
      buf.set(this.carry);
      buf.set(chunk, this.carry.length);
    }
    const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    const end = buf.length;
    let p = 0;
    if (!this.header) {
      if (end < HEADER_BYTES) {
        this.carry = buf.slice();
        return [];
      }
      for (let i = 0; i < SIGNATURE.length; i++) if (buf[i] !== SIGNATURE[i]) throw new CopyFormatError("not a binary COPY stream");
      const ext = view.getInt32(SIGNATURE.length + 4);
      if (end < HEADER_BYTES + ext) {
        this.carry = buf.slice();
        return [];
      }
      p = HEADER_BYTES + ext;
      this.header = true;
    }
    const groups: CopyGroup[] = [];
    let start = p;
    const n = this.fields;
    for (;;) {
      if (p + 2 > end) break;
      const count = view.getInt16(p);
      if (count === -1) {
        this.keep(buf.subarray(start, p));
        start = p;
        this.ended = true;
        if (p + 2 !== end) throw new CopyFormatError("bytes after the COPY trailer");
        p = end;
        break;
      }
      if (count !== n) throw new CopyFormatError(`a COPY row has ${count} fields, expected ${n}`);
      let q = p + 2;
      let whole = true;
      for (let f = 0; f < n; f++) {
        if (q + 4 > end) {
          whole = false;
          break;
        }
        const l = view.getInt32(q);
        q += 4 + (l > 0 ? l : 0);
        if (q > end) {
          whole = false;
          break;
        }
      }
      if (!whole) break;
      p = q;
      this.rows += 1;
      this.groupRows += 1;
      if (this.groupRows === this.rowsPerGroup) {
        this.keep(buf.subarray(start, p));
        start = p;
        groups.push(this.close());
      }
    }
    if (!this.ended) {
      this.keep(buf.subarray(start, p));
      // An incomplete row waits for the rest (a copy: `buf` may be reused by its producer).
      this.carry = buf.slice(p);
    } else this.carry = new Uint8Array(0);
    return groups;
  }

  /** The end of the stream: the last, partial group (undefined when it is empty). Throws when the trailer never came. */
  end(): CopyGroup | undefined {
    if (!this.ended) throw new CopyFormatError("the COPY stream ended without its trailer");
    return this.groupRows > 0 ? this.close() : undefined;
  }
}
