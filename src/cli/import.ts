// `resource-store import FILE...`: creates resources from NDJSON, JSON arrays
// or parquet in batches, several batches in flight, parents before children
// across batches, streaming the input so memory stays bounded.
//
// Ordering: every record is added to the batch being filled unless its
// parent is still ahead of it:
//  - parent in the batch being filled: same batch (the service accepts any
//    order inside one batch);
//  - parent in a batch sent but not yet committed: this batch waits for that
//    one before it is sent;
//  - parent committed by this run (recently), or found active in the store:
//    sent as is;
//  - parent unknown: the record waits until its parent turns up in the input
//    (then it joins the parent's batch) or is found in the store; at the end
//    of the input whatever still waits is sent and the service judges it.
import { fromJson } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ResourceSchema, type Resource } from "../../gen/resourcestore/type/v1/resource_pb.js";
import { flatResourceToProtoJson } from "../schema/flat-codec.js";
import type { ResourceStoreClient } from "../client/index.js";
import { activeAmong, describeError, warn } from "./common.js";
import { detectFormat, fileSize, readInput } from "./input.js";
import type { Progress } from "./progress.js";

export interface ImportOptions {
  readonly batchSize: number;
  readonly concurrency: number;
  readonly resume: boolean;
}

interface Item {
  readonly file: string;
  readonly line: number;
  readonly identifier: string;
  readonly parent: string | undefined;
  readonly message: Resource;
}

interface Batch {
  readonly no: number;
  readonly items: Item[];
  /** Earlier batches that hold a parent of one of these items. */
  readonly deps: Set<number>;
}

export interface ImportResult {
  readonly imported: number;
  readonly skipped: number;
  readonly failed: boolean;
}

/** Turns one input record into the message sent, or says why it cannot be. */
function toItem(file: string, line: number, value: unknown): Item {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new Error("a resource must be a JSON object");
  const flat = value as Record<string, unknown>;
  const identifier = flat.identifier;
  if (typeof identifier !== "string" || identifier === "") throw new Error("identifier is required (a string)");
  const parent = typeof flat.parent_identifier === "string" ? flat.parent_identifier : undefined;
  const message = fromJson(ResourceSchema, flatResourceToProtoJson(flat), { ignoreUnknownFields: false });
  return { file, line, identifier, parent, message };
}

/** Identifiers of the batch that the service's message names, with their lines. */
function namedLines(items: readonly Item[], text: string): string[] {
  const out: string[] = [];
  for (const it of items) {
    let from = 0;
    for (let at = text.indexOf(it.identifier, from); at !== -1; at = text.indexOf(it.identifier, from)) {
      const before = at === 0 ? "" : text[at - 1]!;
      const after = text[at + it.identifier.length] ?? "";
      if (!/[A-Za-z0-9._:@-]/.test(before) && !/[A-Za-z0-9._:@-]/.test(after)) {
        out.push(`  ${it.file}:${it.line}: ${it.identifier}`);
        break;
      }
      from = at + 1;
    }
    if (out.length >= 20) break;
  }
  return out;
}

function lineRanges(items: readonly Item[]): string {
  const byFile = new Map<string, number[]>();
  for (const it of items) byFile.set(it.file, [...(byFile.get(it.file) ?? []), it.line]);
  return [...byFile].map(([f, lines]) => `${f} lines ${Math.min(...lines)}-${Math.max(...lines)}`).join(", ");
}

/**
 * Codes with which the service refuses a create before it writes anything
 * (the 4xx of docs/contract/11-errors.md, and a method it does not have). Any other
 * failure once the request has gone out (a lost connection, a timeout,
 * `unavailable`, `internal`) leaves the batch's fate unknown: the commit may
 * have happened before the answer was lost.
 */
const REFUSALS = new Set<Code>([
  Code.InvalidArgument,
  Code.FailedPrecondition,
  Code.OutOfRange,
  Code.NotFound,
  Code.AlreadyExists,
  Code.Unauthenticated,
  Code.PermissionDenied,
  Code.ResourceExhausted,
  Code.Unimplemented,
]);

/**
 * Whether `err` is the service's own refusal. The code alone is not enough:
 * the client library makes some of these codes itself (an answer too large
 * to read is resource_exhausted after the service has committed), so the
 * error must also carry the headers or trailers of the service's answer.
 */
export function refusedBeforeWriting(err: unknown): boolean {
  if (!(err instanceof ConnectError) || !REFUSALS.has(err.code)) return false;
  for (const _ of err.metadata.keys()) return true;
  return false;
}

/** Two generations of identifiers this run committed: bounded, and enough for parents that come shortly before their children. */
class RecentSet {
  private current = new Set<string>();
  private previous = new Set<string>();
  constructor(private readonly cap: number) {}
  add(id: string): void {
    this.current.add(id);
    if (this.current.size >= this.cap) {
      this.previous = this.current;
      this.current = new Set();
    }
  }
  has(id: string): boolean {
    return this.current.has(id) || this.previous.has(id);
  }
}

export async function runImport(
  client: ResourceStoreClient,
  files: readonly string[],
  opts: ImportOptions,
  progress: Progress,
  url: string,
): Promise<ImportResult> {
  let imported = 0;
  let skipped = 0;
  let failed = false;
  let batchNo = 0;
  let current: Batch = { no: batchNo++, items: [], deps: new Set() };
  /** identifier -> number of the batch (filling or in flight) that holds it. */
  const batchOf = new Map<string, number>();
  /** batch number -> its promise, while in flight. */
  const inFlight = new Map<number, Promise<void>>();
  const recent = new RecentSet(Math.max(100_000, opts.batchSize * opts.concurrency * 4));
  /** parent identifier -> items waiting for it. */
  const waiting = new Map<string, Item[]>();
  let waitingCount = 0;

  let rowsRead = 0;
  let bytesDone = 0;
  let bytesTotal = 0;
  const sizes = await Promise.all(files.map((f) => fileSize(f).catch(() => 0)));
  bytesTotal = sizes.reduce((a, b) => a + b, 0);
  const tick = () => progress.update({ done: bytesDone, total: bytesTotal, rows: imported, bytes: bytesDone });

  const fail = (text: string) => {
    if (!failed) failed = true;
    warn(`error: ${text}`);
  };

  async function sendBatch(batch: Batch): Promise<void> {
    const deps = [...batch.deps].map((b) => inFlight.get(b)).filter((p): p is Promise<void> => p !== undefined);
    await Promise.all(deps);
    let items = batch.items;
    /** Whether the create went out: from then on only the service's refusal proves that nothing was written. */
    let sent = false;
    try {
      if (failed) return; // an earlier batch failed: send nothing more
      if (opts.resume) {
        const active = await activeAmong(
          client,
          items.map((i) => i.identifier),
        );
        if (active.size > 0) {
          items = items.filter((i) => !active.has(i.identifier));
          skipped += batch.items.length - items.length;
        }
      }
      if (items.length > 0) {
        sent = true;
        const res = await client.resources.create({ resources: items.map((i) => i.message) });
        imported += Number(res.created);
      }
      for (const it of batch.items) recent.add(it.identifier);
      tick();
    } catch (err) {
      const text = describeError(err, url);
      const named = namedLines(items, text);
      const outcome =
        !sent || refusedBeforeWriting(err)
          ? "nothing of this batch was written"
          : "it may have been written: run again with --resume to complete it";
      fail(
        `${lineRanges(items)} (batch ${batch.no + 1}, ${items.length} resources; ${outcome}): ${text}` +
          (named.length > 0 ? `\n${named.join("\n")}` : ""),
      );
    } finally {
      for (const it of batch.items) if (batchOf.get(it.identifier) === batch.no) batchOf.delete(it.identifier);
      inFlight.delete(batch.no);
    }
  }

  async function seal(): Promise<void> {
    if (current.items.length === 0) return;
    const batch = current;
    current = { no: batchNo++, items: [], deps: new Set() };
    while (inFlight.size >= opts.concurrency) await Promise.race(inFlight.values());
    if (failed) return;
    inFlight.set(batch.no, sendBatch(batch));
  }

  /** Puts an item (and then everything that waited for it) into the batch being filled. */
  async function place(item: Item): Promise<void> {
    const queue = [item];
    while (queue.length > 0) {
      const it = queue.shift()!;
      if (current.items.length >= opts.batchSize) await seal();
      if (it.parent !== undefined) {
        const pb = batchOf.get(it.parent);
        if (pb !== undefined && pb !== current.no && inFlight.has(pb)) current.deps.add(pb);
      }
      current.items.push(it);
      batchOf.set(it.identifier, current.no);
      const children = waiting.get(it.identifier);
      if (children) {
        waiting.delete(it.identifier);
        waitingCount -= children.length;
        queue.push(...children);
      }
    }
  }

  /** Asks the store which waited-for parents are active, and releases their children. */
  async function releaseFromStore(): Promise<void> {
    const parents = [...waiting.keys()];
    for (const id of await activeAmong(client, parents)) {
      const children = waiting.get(id);
      if (!children) continue;
      waiting.delete(id);
      waitingCount -= children.length;
      for (const c of children) await place(c);
    }
  }
  let nextStoreCheck = opts.batchSize;

  async function accept(item: Item): Promise<void> {
    const p = item.parent;
    if (p === undefined || batchOf.has(p) || recent.has(p)) return place(item);
    const list = waiting.get(p);
    if (list) list.push(item);
    else waiting.set(p, [item]);
    waitingCount++;
    if (waitingCount >= nextStoreCheck) {
      await releaseFromStore();
      // check again once as many more have piled up, so a long wait costs few reads
      nextStoreCheck = waitingCount + opts.batchSize;
    }
  }

  try {
    let offset = 0;
    for (const [fi, file] of files.entries()) {
      if (failed) break;
      const format = await detectFormat(file);
      for await (const rec of readInput(file, format)) {
        bytesDone = offset + rec.position;
        rowsRead++;
        if (rec.error !== undefined) {
          fail(`${file}:${rec.line}: ${rec.error} (the batch holding this line was not sent)`);
          break;
        }
        let item: Item;
        try {
          item = toItem(file, rec.line, rec.value);
        } catch (err) {
          fail(`${file}:${rec.line}: ${describeError(err)} (the batch holding this line was not sent)`);
          break;
        }
        await accept(item);
        if (failed) break;
        if ((rowsRead & 1023) === 0) tick();
      }
      offset += sizes[fi] ?? 0;
    }
    if (!failed) {
      // whatever still waits: parents in the store (or nowhere: the service will say)
      if (waiting.size > 0) await releaseFromStore();
      for (const [parent, children] of [...waiting]) {
        waiting.delete(parent);
        for (const c of children) await place(c);
      }
      await seal();
    }
  } catch (err) {
    fail(describeError(err, url));
  }
  while (inFlight.size > 0) await Promise.race(inFlight.values());
  tick();
  return { imported, skipped, failed };
}
