// Stitches small parquet files of one schema (one per row group, encoded in
// parallel by the encoder pool) into one file, in order:
//
//   "PAR1" | part 1's column chunks | part 2's | ... | column indexes |
//   offset indexes | merged footer | footer length | "PAR1"
//
// Each part's column chunks are copied as they are; the footer is the first
// part's FileMetaData (schema, key-value metadata, created_by, column orders,
// and any field this code does not know) with every part's row groups, their
// offsets shifted to where the part's bytes landed, ordinals renumbered and
// num_rows summed. The page indexes sit after all row groups, as writers put
// them; the offset indexes hold absolute page offsets, so they are rewritten.
import {
  field,
  intField,
  listField,
  readStruct,
  removeField,
  setField,
  structField,
  TType,
  writeStruct,
  type ThriftStruct,
} from "./thrift-compact.js";

const MAGIC = new Uint8Array([0x50, 0x41, 0x52, 0x31]); // "PAR1"

// Field ids of parquet.thrift.
const FMD = { schema: 2, numRows: 3, rowGroups: 4 } as const;
const RG = { columns: 1, numRows: 3, fileOffset: 5, ordinal: 7 } as const;
const CC = {
  filePath: 1,
  fileOffset: 2,
  metaData: 3,
  offsetIndexOffset: 4,
  offsetIndexLength: 5,
  columnIndexOffset: 6,
  columnIndexLength: 7,
  crypto: 8,
  encryptedMeta: 9,
} as const;
const CMD = {
  totalCompressedSize: 7,
  dataPageOffset: 9,
  indexPageOffset: 10,
  dictionaryPageOffset: 11,
  bloomFilterOffset: 14,
} as const;
const PAGE_LOCATIONS = 1;
const PAGE_OFFSET = 1;

/** A part that cannot be stitched (not one of ours, or not what was sent to the encoder). */
export class StitchError extends Error {}

function isMagic(b: Uint8Array, at: number): boolean {
  return MAGIC.every((m, i) => b[at + i] === m);
}

interface IndexRef {
  readonly chunk: ThriftStruct;
  readonly bytes: Uint8Array;
}

export class ParquetStitcher {
  /** Where the next part's column chunks go (after "PAR1"). */
  private position = 4;
  private head: ThriftStruct | undefined;
  private schemaBytes: Uint8Array | undefined;
  private readonly rowGroups: ThriftStruct[] = [];
  private readonly columnIndexes: IndexRef[] = [];
  private readonly offsetIndexes: IndexRef[] = [];
  private rowCount = 0n;

  /** The first bytes of the file. */
  header(): Uint8Array {
    return MAGIC.slice();
  }

  /** Rows of every part added so far. */
  get rows(): bigint {
    return this.rowCount;
  }

  /**
   * Takes one complete parquet file that must hold `expectedRows` rows and
   * returns the bytes to write next: its column chunks (a view into `file`).
   */
  add(file: Uint8Array, expectedRows: number): Uint8Array {
    if (file.length < 12 || !isMagic(file, 0) || !isMagic(file, file.length - 4))
      throw new StitchError("encoded part is not a parquet file");
    const footerLength = new DataView(file.buffer, file.byteOffset + file.length - 8, 4).getUint32(0, true);
    const footerStart = file.length - 8 - footerLength;
    if (footerStart < 4) throw new StitchError("encoded part's footer length is out of range");
    // Parsed from a copy: the row groups' binary fields (statistics) are views
    // into what they were read from, and they stay until the file's footer is
    // written; views into the part would keep every part's bytes alive.
    const { value: meta, end } = readStruct(file.slice(footerStart, file.length - 8));
    if (end !== footerLength) throw new StitchError("encoded part's footer does not end where its length says");

    const partRows = intField(meta, FMD.numRows);
    if (partRows !== BigInt(expectedRows))
      throw new StitchError(`encoded part holds ${String(partRows)} rows, ${expectedRows} were sent`);
    const schema = field(meta, FMD.schema);
    if (!schema) throw new StitchError("encoded part has no schema");
    const schemaBytes = writeStruct({ kind: "struct", fields: [schema] });
    if (this.schemaBytes === undefined) this.schemaBytes = schemaBytes;
    else if (!sameBytes(this.schemaBytes, schemaBytes)) throw new StitchError("encoded parts differ in schema");

    const groups = (listField(meta, FMD.rowGroups)?.items ?? []) as ThriftStruct[];
    // The column chunks run from byte 4 to the end of the furthest chunk; page indexes follow.
    let chunksEnd = 4n;
    let groupRows = 0n;
    for (const g of groups) {
      groupRows += intField(g, RG.numRows) ?? 0n;
      for (const c of (listField(g, RG.columns)?.items ?? []) as ThriftStruct[]) {
        if (field(c, CC.filePath) || field(c, CC.crypto) || field(c, CC.encryptedMeta))
          throw new StitchError("encoded part uses external or encrypted column chunks");
        const md = structField(c, CC.metaData);
        if (!md) throw new StitchError("encoded part has a column chunk without metadata");
        if (field(md, CMD.bloomFilterOffset)) throw new StitchError("encoded part has bloom filters");
        const start = chunkStart(md);
        const size = intField(md, CMD.totalCompressedSize) ?? -1n;
        if (start < 4n || size < 0n) throw new StitchError("encoded part has a column chunk out of range");
        if (start + size > chunksEnd) chunksEnd = start + size;
      }
    }
    if (groupRows !== partRows) throw new StitchError("encoded part's row groups do not add up to its row count");
    if (chunksEnd > BigInt(footerStart)) throw new StitchError("encoded part's column chunks overlap its footer");
    const bodyEnd = Number(chunksEnd);
    const shift = BigInt(this.position - 4);

    for (const g of groups) {
      shiftField(g, RG.fileOffset, shift);
      setField(g, RG.ordinal, TType.I16, this.rowGroups.length);
      for (const c of (listField(g, RG.columns)?.items ?? []) as ThriftStruct[]) {
        const md = structField(c, CC.metaData) as ThriftStruct;
        // file_offset is deprecated; writers put 0 there, which stays 0.
        if ((intField(c, CC.fileOffset) ?? 0n) > 0n) shiftField(c, CC.fileOffset, shift);
        shiftField(md, CMD.dataPageOffset, shift);
        shiftField(md, CMD.indexPageOffset, shift);
        shiftField(md, CMD.dictionaryPageOffset, shift);
        const ci = indexBytes(file, c, CC.columnIndexOffset, CC.columnIndexLength, bodyEnd, footerStart);
        if (ci) this.columnIndexes.push({ chunk: c, bytes: ci.slice() });
        const oi = indexBytes(file, c, CC.offsetIndexOffset, CC.offsetIndexLength, bodyEnd, footerStart);
        if (oi) this.offsetIndexes.push({ chunk: c, bytes: shiftOffsetIndex(oi, shift) });
      }
      this.rowGroups.push(g);
    }
    if (this.head === undefined) {
      removeField(meta, FMD.rowGroups);
      this.head = meta;
    }
    this.rowCount += partRows;
    this.position += bodyEnd - 4;
    return file.subarray(4, bodyEnd);
  }

  /** Everything after the last part: page indexes, footer, its length, "PAR1". */
  finish(): Uint8Array {
    if (this.head === undefined) throw new StitchError("no part to take the schema from");
    const parts: Uint8Array[] = [];
    let at = this.position;
    const place = (refs: IndexRef[], offsetId: number, lengthId: number) => {
      for (const ref of refs) {
        setField(ref.chunk, offsetId, TType.I64, BigInt(at));
        setField(ref.chunk, lengthId, TType.I32, ref.bytes.length);
        parts.push(ref.bytes);
        at += ref.bytes.length;
      }
    };
    place(this.columnIndexes, CC.columnIndexOffset, CC.columnIndexLength);
    place(this.offsetIndexes, CC.offsetIndexOffset, CC.offsetIndexLength);
    const meta: ThriftStruct = { kind: "struct", fields: this.head.fields.map((f) => ({ ...f })) };
    setField(meta, FMD.numRows, TType.I64, this.rowCount);
    setField(meta, FMD.rowGroups, TType.LIST, { kind: "list", elemType: TType.STRUCT, items: this.rowGroups });
    const footer = writeStruct(meta);
    const length = new Uint8Array(4);
    new DataView(length.buffer).setUint32(0, footer.length, true);
    parts.push(footer, length, MAGIC);
    return Buffer.concat(parts);
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function chunkStart(md: ThriftStruct): bigint {
  const data = intField(md, CMD.dataPageOffset) ?? -1n;
  const dict = intField(md, CMD.dictionaryPageOffset);
  return dict !== undefined && dict > 0n && dict < data ? dict : data;
}

function shiftField(s: ThriftStruct, id: number, shift: bigint): void {
  const f = field(s, id);
  if (!f) return;
  if (typeof f.value === "bigint") f.value = f.value + shift;
  else if (typeof f.value === "number") f.value = Number(BigInt(f.value) + shift);
  else throw new StitchError(`encoded part has a non-integer offset (field ${id})`);
}

/** The bytes of a page index a column chunk points to, which must lie between the chunks and the footer. */
function indexBytes(
  file: Uint8Array,
  chunk: ThriftStruct,
  offsetId: number,
  lengthId: number,
  from: number,
  to: number,
): Uint8Array | undefined {
  const offset = intField(chunk, offsetId);
  const length = intField(chunk, lengthId);
  if (offset === undefined || length === undefined) {
    removeField(chunk, offsetId);
    removeField(chunk, lengthId);
    return undefined;
  }
  if (offset < BigInt(from) || length < 0n || offset + length > BigInt(to))
    throw new StitchError("encoded part's page index is out of range");
  return file.subarray(Number(offset), Number(offset + length));
}

/** An OffsetIndex with every page location moved by `shift`. */
function shiftOffsetIndex(bytes: Uint8Array, shift: bigint): Uint8Array {
  const { value, end } = readStruct(bytes);
  if (end !== bytes.length) throw new StitchError("encoded part's offset index has trailing bytes");
  for (const loc of (listField(value, PAGE_LOCATIONS)?.items ?? []) as ThriftStruct[])
    shiftField(loc, PAGE_OFFSET, shift);
  return writeStruct(value);
}
