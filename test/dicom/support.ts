// What the DICOM tests share: a caller with a token, the whole store read
// back, the stored objects fetched.
import { execFile } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";

export const exec = promisify(execFile);

export const TOKENS = {
  importer: "dicom-importer-token-0123456789",
  admin: "dicom-admin-token-0123456789",
  internalOnly: "dicom-internal-token-0123456789",
};

/** Tokens of the DICOM tests' services: an importer, an admin who sees everything, a reader cleared for `internal` only. */
export const API_TOKENS = [
  `${TOKENS.importer}=read,write,actor:importer`,
  `${TOKENS.admin}=read,write,admin`,
  `${TOKENS.internalOnly}=read,clearance:internal`,
].join(";");

export function caller(url: () => string, token: string) {
  return async (method: "GET" | "POST", path: string, body?: unknown): Promise<{ status: number; json: any }> => {
    const res = await fetch(url() + path, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, json: await res.json() };
  };
}

export type Flat = Record<string, unknown> & {
  identifier: string;
  payload_type: string;
  parent_identifier: string | null;
};

/** Every active resource, oldest first by identifier. */
export async function everything(call: ReturnType<typeof caller>): Promise<Flat[]> {
  const out: Flat[] = [];
  let cursor: string | undefined;
  do {
    const r = await call("POST", "/query", {
      sort_by: "identifier",
      sort_order: "asc",
      limit: 1000,
      ...(cursor ? { cursor } : {}),
    });
    if (r.status !== 200) throw new Error(`query answered ${r.status}: ${JSON.stringify(r.json)}`);
    out.push(...(r.json.results as Flat[]));
    cursor = r.json.next_cursor ?? undefined;
  } while (cursor !== undefined);
  return out;
}

/** The bytes of a stored object, through a presigned download. */
export async function download(call: ReturnType<typeof caller>, path: string): Promise<Buffer> {
  const dl = await call("POST", "/s3/presign", { direction: "download", path });
  if (dl.status !== 200) throw new Error(`presign answered ${dl.status}`);
  return Buffer.from(await (await fetch(dl.json.url as string)).arrayBuffer());
}

/** dcmdump's text of an object (it fails on a file it cannot read). */
export async function dcmdump(dir: string, name: string, bytes: Buffer): Promise<string> {
  const file = join(dir, name);
  await writeFile(file, bytes);
  return (await exec("dcmdump", ["-q", "+L", file], { maxBuffer: 16 * 1024 * 1024 })).stdout;
}
