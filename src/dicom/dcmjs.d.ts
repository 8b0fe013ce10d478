// The part of dcmjs (no types of its own) that deidentify.ts uses.
declare module "dcmjs" {
  export interface DicomElement {
    vr: string;
    Value?: unknown[];
    InlineBinary?: string;
    BulkDataURI?: string;
  }
  export type DicomDataset = Record<string, DicomElement>;
  export interface DicomDictInstance {
    meta: DicomDataset;
    dict: DicomDataset;
    write(options?: Record<string, unknown>): ArrayBuffer;
  }
  const dcmjs: {
    data: {
      DicomMessage: { readFile(buffer: ArrayBuffer, options?: Record<string, unknown>): DicomDictInstance };
    };
    log: { setLevel(level: string): void };
  };
  export default dcmjs;
}
