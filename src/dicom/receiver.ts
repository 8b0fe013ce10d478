// The DICOM receiver: with DICOM_PORT set the service also listens as a
// C-STORE and C-ECHO SCP (dcmjs-dimse speaks DIMSE). What arrives is filed by
// the filer `import-dicom` uses (filer.ts), through the service's own API in
// process (App.localTransport, the same pipeline as every call) as the caller
// `dicom:<calling AE title>`, so a study sent by a modality and the same
// files imported from a folder make the same tree.
//
// A C-STORE is answered Success once its object is written and synced to the
// receiver's spool on disk (DICOM_SPOOL_DIR, docs/dicom.md "The receiver");
// the spool is filed in batches behind it, and an association's release is
// answered only once all it sent is filed (aborted instead when some of it
// could not be). A sender that stops and waits for each answer (every DIMSE
// sender does) would otherwise wait for a whole filing per instance: the
// `dicom-receiver` bench line. What the spool still holds at start-up (the
// service stopped before filing it) is filed before the port opens.
import { randomBytes } from "node:crypto";
import { mkdir, open, readdir, readFile, rm, type FileHandle } from "node:fs/promises";
import net from "node:net";
import { join } from "node:path";
import type { Writable } from "node:stream";
import { createClient, createContextValues, type ContextValues, type Transport } from "@connectrpc/connect";
import dimse from "dcmjs-dimse";
import * as v2Query from "../../gen/resourcestore/v2/query_service_pb.js";
import * as v2Registry from "../../gen/resourcestore/v2/registry_service_pb.js";
import * as v2Resource from "../../gen/resourcestore/v2/resource_service_pb.js";
import * as v2Storage from "../../gen/resourcestore/v2/storage_service_pb.js";
import type { Caller } from "../access/index.js";
import { trustedCallerKey } from "../auth/index.js";
import type { Logger } from "../log.js";
import type { ReceiverConfig } from "./receiver-config.js";
import { createFiler, type Filer, type FilerClient, type Instance, type Outcome } from "./filer.js";
import { DicomReadError, readHeader } from "./header.js";

const { Dataset, Scp } = dimse;
const {
  Status,
  PresentationContextResult,
  RejectResult,
  RejectSource,
  RejectReason,
  AbortSource,
  AbortReason,
  TransferSyntax,
  SopClass,
} = dimse.constants;
dimse.log.setLevel("silent");

/** A transport whose calls carry `caller` (the auth interceptor takes it instead of a token). */
function asCaller(transport: Transport, caller: Caller): Transport {
  const values = (given: ContextValues | undefined) => (given ?? createContextValues()).set(trustedCallerKey, caller);
  return {
    unary: (method, signal, timeoutMs, header, input, contextValues) =>
      transport.unary(method, signal, timeoutMs, header, input, values(contextValues)),
    stream: (method, signal, timeoutMs, header, input, contextValues) =>
      transport.stream(method, signal, timeoutMs, header, input, values(contextValues)),
  };
}

function clientAs(transport: Transport, caller: Caller): FilerClient {
  const t = asCaller(transport, caller);
  return {
    resources: createClient(v2Resource.ResourceService, t),
    query: createClient(v2Query.QueryService, t),
    registry: createClient(v2Registry.RegistryService, t),
    storage: createClient(v2Storage.StorageService, t),
  };
}

function padded(value: string, pad: number): Buffer {
  const b = Buffer.from(value, "latin1");
  return b.length % 2 === 0 ? b : Buffer.concat([b, Buffer.from([pad])]);
}

function metaElement(element: number, vr: string, value: Buffer): Buffer {
  const long = vr === "OB";
  const head = Buffer.alloc(long ? 12 : 8);
  head.writeUInt16LE(0x0002, 0);
  head.writeUInt16LE(element, 2);
  head.write(vr, 4, "latin1");
  if (long) head.writeUInt32LE(value.length, 8);
  else head.writeUInt16LE(value.length, 6);
  return Buffer.concat([head, value]);
}

/** A Part 10 file around a dataset as it arrived: preamble, "DICM", the file meta information, the dataset bytes untouched. */
export function part10(
  dataset: Buffer,
  sopClass: string,
  sopInstance: string,
  transferSyntax: string,
  sourceAe: string,
): Buffer {
  const group = Buffer.concat([
    metaElement(0x0001, "OB", Buffer.from([0, 1])),
    metaElement(0x0002, "UI", padded(sopClass, 0)),
    metaElement(0x0003, "UI", padded(sopInstance, 0)),
    metaElement(0x0010, "UI", padded(transferSyntax, 0)),
    metaElement(0x0012, "UI", padded(dimse.Implementation.getImplementationClassUid(), 0)),
    metaElement(0x0013, "SH", padded("RESOURCESTORE", 0x20)),
    metaElement(0x0016, "AE", padded(sourceAe, 0x20)),
  ]);
  const length = Buffer.alloc(4);
  length.writeUInt32LE(group.length, 0);
  return Buffer.concat([
    Buffer.alloc(128),
    Buffer.from("DICM", "latin1"),
    metaElement(0x0000, "UL", length),
    group,
    dataset,
  ]);
}

/** Transfer syntaxes taken as offered, best first: the object is stored as it was sent. */
const ACCEPTED_SYNTAXES = [
  TransferSyntax.ExplicitVRLittleEndian,
  TransferSyntax.ImplicitVRLittleEndian,
  TransferSyntax.JpegLossless,
  TransferSyntax.JpegBaseline,
  TransferSyntax.Jpeg2000Lossless,
  TransferSyntax.Jpeg2000Lossy,
  TransferSyntax.JpegLsLossless,
  TransferSyntax.JpegLsLossy,
  TransferSyntax.RleLossless,
];

/** Batches of one sender filed at once. */
const LANE_BATCHES = 4;

/** Spooled instances of one sender waiting to be filed before its C-STOREs are answered later (backpressure on a sender faster than filing). */
const MAX_QUEUED = 4096;

/** Objects up to this size stay in memory from receipt to filing; larger ones are read back from the spool. */
const KEEP_BYTES = 256 * 1024;

interface Queued {
  readonly ae: string;
  readonly instance: Instance;
  done(error: string | undefined): void;
}

/** A spool folder per calling AE title, named by its hex (an AE title may hold characters a path may not). */
function aeFolder(ae: string): string {
  return `ae-${Buffer.from(ae, "latin1").toString("hex")}`;
}

function aeOfFolder(name: string): string | undefined {
  return /^ae-([0-9a-f]{2})+$/.test(name) ? Buffer.from(name.slice(3), "hex").toString("latin1") : undefined;
}

/** Bytes a spool segment takes before the next one is started. */
const SEGMENT_BYTES = 64 * 1024 * 1024;

interface Segment {
  readonly path: string;
  readonly fh: FileHandle;
  size: number;
  /** Records written and not yet filed. */
  open: number;
  /** Takes no more records. */
  sealed: boolean;
  removed: boolean;
}

/** Where a received object is in the spool. */
interface Spooled {
  readonly segment: Segment;
  readonly offset: number;
  readonly length: number;
}

/**
 * One sender's spool: append-only segment files of records (a 4-byte
 * little-endian length, then the Part 10 bytes). The C-STOREs that arrive
 * while a write is under way are written and synced together by the next one
 * (one write and one fdatasync for all of them, not a file each: the spool's
 * share of the receiver's CPU, `service CPU per instance` in the bench). A
 * segment is removed once every record in it is filed. A record cut short (the
 * service stopped while writing it) was never answered, and is ignored when
 * the spool is read at start-up. Owner-only, as DATA_DIR is: it holds the
 * objects as received, direct identifiers and all.
 */
class SpoolLog {
  private current: Segment | undefined;
  private readonly pending: { bytes: Buffer; resolve(s: Spooled): void; reject(err: unknown): void }[] = [];
  private flushing = false;

  constructor(private readonly dir: string) {}

  /** Resolves once the bytes are written and synced. */
  append(bytes: Buffer): Promise<Spooled> {
    return new Promise((resolve, reject) => {
      this.pending.push({ bytes, resolve, reject });
      void this.flush();
    });
  }

  /** The bytes of a record (for objects not kept in memory until they are filed). */
  async read(at: Spooled): Promise<Buffer> {
    const buf = Buffer.alloc(at.length);
    const { bytesRead } = await at.segment.fh.read(buf, 0, at.length, at.offset);
    if (bytesRead !== at.length) throw new Error("the spool record is shorter than written");
    return buf;
  }

  /** A record is filed: its segment goes once none of its records waits. */
  async filed(at: Spooled): Promise<void> {
    at.segment.open--;
    await this.release(at.segment);
  }

  async close(): Promise<void> {
    if (this.current !== undefined && !this.current.removed) await this.current.fh.close().catch(() => {});
  }

  private async segment(): Promise<Segment> {
    if (this.current !== undefined && !this.current.sealed) return this.current;
    const path = join(this.dir, `${Date.now().toString(36)}-${randomBytes(8).toString("hex")}.seg`);
    const fh = await open(path, "a+", 0o600);
    this.current = { path, fh, size: 0, open: 0, sealed: false, removed: false };
    return this.current;
  }

  private async flush(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    try {
      while (this.pending.length > 0) {
        const group = this.pending.splice(0);
        let seg: Segment;
        try {
          seg = await this.segment();
        } catch (err) {
          for (const p of group) p.reject(err);
          continue;
        }
        const parts: Buffer[] = [];
        const placed: Spooled[] = [];
        let end = seg.size;
        for (const p of group) {
          const head = Buffer.alloc(4);
          head.writeUInt32LE(p.bytes.length, 0);
          parts.push(head, p.bytes);
          placed.push({ segment: seg, offset: end + 4, length: p.bytes.length });
          end += 4 + p.bytes.length;
        }
        try {
          await seg.fh.appendFile(Buffer.concat(parts));
          await seg.fh.datasync();
          seg.size = end;
          seg.open += group.length;
          group.forEach((p, k) => p.resolve(placed[k]!));
        } catch (err) {
          // Part of the group may be written: nothing more goes into this segment.
          seg.sealed = true;
          for (const p of group) p.reject(err);
        }
        if (seg.size >= SEGMENT_BYTES) seg.sealed = true;
        if (seg.sealed) await this.release(seg);
      }
    } finally {
      this.flushing = false;
    }
  }

  /** Removes a segment none of whose records waits: a sealed one, or the current one while nothing is being written. */
  private async release(seg: Segment): Promise<void> {
    if (seg.open > 0 || seg.removed) return;
    if (!seg.sealed) {
      if (seg !== this.current || this.flushing || this.pending.length > 0) return;
      seg.sealed = true;
    }
    seg.removed = true;
    await seg.fh.close().catch(() => {});
    await rm(seg.path, { force: true });
  }
}

/** The whole records of a spool segment, in order; a record cut short ends it. */
function spoolRecords(data: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at + 4 <= data.length;) {
    const length = data.readUInt32LE(at);
    if (at + 4 + length > data.length) break;
    out.push(data.subarray(at + 4, at + 4 + length));
    at += 4 + length;
  }
  return out;
}

export interface DicomReceiver {
  readonly port: number;
  close(): Promise<void>;
}

export async function startDicomReceiver(
  config: ReceiverConfig,
  transport: Transport,
  log: Logger,
): Promise<DicomReceiver> {
  const filers = new Map<string, Filer>();
  const filerFor = (ae: string): Filer => {
    let f = filers.get(ae);
    if (f === undefined) {
      const caller: Caller = {
        actor: `dicom:${ae}`,
        grants: { datasources: new Set([config.datasource]), clearance: "restricted" },
      };
      f = createFiler(clientAs(transport, caller), {
        datasource: config.datasource,
        accessLevel: config.accessLevel,
        concurrency: 8,
        retries: 3,
        ...(config.deidentifyKey !== undefined ? { deidentifyKey: config.deidentifyKey } : {}),
      });
      filers.set(ae, f);
    }
    return f;
  };

  // One filing lane per calling AE (its actor): the instances of all its
  // associations queue there and are filed in batches, a few at a time
  // (LANE_BATCHES), so one sender's parallel associations share round trips.
  // Lanes of different senders run side by side. A sender's batches create
  // patients, studies and series one batch at a time (filer.ts); when batches
  // of two senders meet on one being created, the loser's create is refused
  // (all or nothing) and its batch is filed again, finding what the other made.
  interface Lane {
    readonly queue: Queued[];
    /** Batches being filed now: up to LANE_BATCHES, so a batch's round trips overlap the next one's. */
    running: number;
    settled: Promise<void>;
    /** C-STOREs whose answer waits for room in the queue (MAX_QUEUED). */
    readonly waiting: (() => void)[];
    /** The sender's spool folder, made once. */
    readonly spool: Promise<SpoolLog>;
  }
  const lanes = new Map<string, Lane>();
  const laneOf = (ae: string): Lane => {
    let lane = lanes.get(ae);
    if (lane === undefined) {
      const dir = join(config.spoolDir, aeFolder(ae));
      const spool = mkdir(dir, { recursive: true, mode: 0o700 }).then(() => new SpoolLog(dir));
      spool.catch(() => lanes.delete(ae));
      lane = { queue: [], running: 0, settled: Promise.resolve(), waiting: [], spool };
      lanes.set(ae, lane);
    }
    return lane;
  };
  /** Resolves once the sender's queue has room: a sender faster than filing is answered at the filing's pace. */
  const room = (lane: Lane): Promise<void> =>
    lane.queue.length < MAX_QUEUED ? Promise.resolve() : new Promise((r) => lane.waiting.push(r));
  async function drain(ae: string): Promise<void> {
    const lane = laneOf(ae);
    if (lane.running >= LANE_BATCHES) return;
    lane.running++;
    try {
      const filer = filerFor(ae);
      while (lane.queue.length > 0) {
        const batch = lane.queue.splice(0, config.batchSize);
        while (lane.waiting.length > 0 && lane.queue.length < MAX_QUEUED) lane.waiting.shift()!();
        let outcomes: Outcome[] | undefined;
        // A batch beside it (or another sender's) may have created part of the hierarchy first: filed again, it finds it.
        for (let attempt = 0; attempt < 3 && outcomes === undefined; attempt++) {
          try {
            outcomes = await filer.file(batch.map((q) => q.instance));
          } catch (err) {
            log.warn({ err, ae, instances: batch.length, attempt }, "DICOM receiver: filing failed");
          }
        }
        batch.forEach((q, k) => {
          const o = outcomes?.[k];
          q.done(o === undefined ? "the store could not file it" : o.kind === "failed" ? o.error : undefined);
        });
      }
    } finally {
      lane.running--;
    }
  }
  // Settles one sender's filer, one settle at a time, each called once what its
  // association sent is filed. A batch marks its series after its files are
  // created, so a series a settle counted too early is counted again by the
  // settle of the association that sent the rest.
  const settling = (ae: string): Promise<void> => {
    const lane = laneOf(ae);
    lane.settled = lane.settled.catch(() => {}).then(() => filerFor(ae).settle());
    return lane.settled;
  };
  const enqueue = (ae: string, instance: Instance): Promise<string | undefined> =>
    new Promise((resolve) => {
      laneOf(ae).queue.push({ ae, instance, done: resolve });
      void drain(ae);
    });

  class ReceiverScp extends Scp {
    private callingAe = "";
    private received = 0;
    /** Instances of this association received and not yet filed (or failed). */
    private outstanding = 0;
    private failed = 0;
    private readonly idle: (() => void)[] = [];

    override associationRequested(association: InstanceType<typeof dimse.association.Association>): void {
      const calling = association.getCallingAeTitle().trim();
      const called = association.getCalledAeTitle().trim();
      if (called !== config.aeTitle) {
        log.warn({ calling, called }, "DICOM receiver: association refused, called AE title unknown");
        this.sendAssociationReject(
          RejectResult.Permanent,
          RejectSource.ServiceUser,
          RejectReason.CalledAeNotRecognized,
        );
        return;
      }
      if (config.allowedAes !== undefined && !config.allowedAes.has(calling)) {
        log.warn({ calling }, "DICOM receiver: association refused, calling AE title not in DICOM_ALLOWED_AES");
        this.sendAssociationReject(
          RejectResult.Permanent,
          RejectSource.ServiceUser,
          RejectReason.CallingAeNotRecognized,
        );
        return;
      }
      this.callingAe = calling;
      for (const c of association.getPresentationContexts()) {
        const context = association.getPresentationContext(c.id);
        const offered = context.getTransferSyntaxUids();
        const chosen = ACCEPTED_SYNTAXES.find((ts) => offered.includes(ts));
        if (context.getAbstractSyntaxUid() === SopClass.Verification)
          context.setResult(PresentationContextResult.Accept, TransferSyntax.ImplicitVRLittleEndian);
        else if (chosen !== undefined) context.setResult(PresentationContextResult.Accept, chosen);
        else context.setResult(PresentationContextResult.RejectTransferSyntaxesNotSupported);
      }
      this.sendAssociationAccept();
    }

    // The end of an association is where a sender's study is complete: once all
    // it sent is filed, instance counts and study modalities are brought up to
    // date and the release is answered (not after every batch, which would
    // cost a count per series). When some of it could not be filed, the
    // association is aborted instead of released, so the sender sees that it
    // failed; what was not filed stays in the spool and is filed at the next
    // start.
    override associationReleaseRequested(): void {
      const ae = this.callingAe;
      void (async () => {
        while (this.outstanding > 0) await new Promise<void>((r) => this.idle.push(r));
        if (this.failed > 0) {
          log.warn({ ae, failed: this.failed }, "DICOM receiver: association aborted, some instances were not filed");
          this.sendAbort(AbortSource.ServiceProvider, AbortReason.NotSpecified);
          return;
        }
        if (this.received > 0)
          await settling(ae).catch((err: unknown) =>
            log.warn({ err, ae }, "DICOM receiver: updating instance counts failed"),
          );
        this.sendAssociationReleaseResponse();
      })();
    }

    override cEchoRequest(
      request: InstanceType<typeof dimse.requests.CEchoRequest>,
      callback: (response: InstanceType<typeof dimse.responses.CEchoResponse>) => void,
    ): void {
      const response = dimse.responses.CEchoResponse.fromRequest(request);
      response.setStatus(Status.Success);
      callback(response);
    }

    // The dataset's bytes are kept as they came (never parsed into dcmjs objects and written back).
    override createDatasetFromStoreWritableStream(
      writable: Writable,
      context: InstanceType<typeof dimse.association.PresentationContext>,
      callback: (dataset: InstanceType<typeof Dataset>) => void,
    ): void {
      const dataset = new Dataset({}, context.getAcceptedTransferSyntaxUid());
      (dataset as unknown as { raw: Buffer }).raw = (writable as unknown as { toBuffer(): Buffer }).toBuffer();
      callback(dataset);
    }

    override cStoreRequest(
      request: InstanceType<typeof dimse.requests.CStoreRequest>,
      callback: (response: InstanceType<typeof dimse.responses.CStoreResponse>) => void,
    ): void {
      const response = dimse.responses.CStoreResponse.fromRequest(request);
      const dataset = request.getDataset() as unknown as { raw?: Buffer; getTransferSyntaxUid(): string } | undefined;
      const ae = this.callingAe;
      const n = ++this.received;
      const reply = (status: number, comment?: string) => {
        response.setStatus(status);
        if (comment !== undefined) response.setErrorComment(comment.slice(0, 64));
        callback(response);
      };
      if (dataset?.raw === undefined) return reply(Status.ProcessingFailure, "no dataset");
      const bytes = part10(
        dataset.raw,
        request.getAffectedSopClassUid(),
        request.getAffectedSopInstanceUid(),
        dataset.getTransferSyntaxUid(),
        ae,
      );
      let header;
      try {
        header = readHeader(bytes);
      } catch (err) {
        const why = err instanceof DicomReadError ? err.message : String(err);
        log.warn({ ae, why }, "DICOM receiver: instance refused");
        return reply(0xc000, why);
      }
      this.outstanding++;
      const settle = (failed: boolean) => {
        if (failed) this.failed++;
        this.outstanding--;
        if (this.outstanding === 0) for (const wake of this.idle.splice(0)) wake();
      };
      const lane = laneOf(ae);
      void (async () => {
        let spool: SpoolLog;
        let at: Spooled;
        try {
          spool = await lane.spool;
          at = await spool.append(bytes);
        } catch (err) {
          log.warn({ err, ae }, "DICOM receiver: instance not written to the spool");
          settle(false);
          return reply(Status.ProcessingFailure, "cannot write it to the spool");
        }
        const kept = bytes.length <= KEEP_BYTES ? bytes : undefined;
        const instance: Instance = {
          name: `${ae} #${n}`,
          header,
          bytes: () => (kept !== undefined ? Promise.resolve(kept) : spool.read(at)),
        };
        void enqueue(ae, instance).then(async (error) => {
          if (error === undefined) await spool.filed(at).catch(() => {});
          else log.warn({ ae, error }, "DICOM receiver: instance not filed; it stays in the spool");
          settle(error !== undefined);
        });
        await room(lane);
        reply(Status.Success);
      })();
    }
  }

  // What the spool held when the service stopped: filed before the port opens,
  // a batch at a time; a segment goes once all its records are filed.
  await mkdir(config.spoolDir, { recursive: true, mode: 0o700 });
  for (const folder of (await readdir(config.spoolDir)).sort()) {
    const ae = aeOfFolder(folder);
    if (ae === undefined) continue;
    const dir = join(config.spoolDir, folder);
    let filed = 0;
    let failed = 0;
    for (const name of (await readdir(dir)).filter((n) => n.endsWith(".seg")).sort()) {
      const path = join(dir, name);
      const records = spoolRecords(await readFile(path));
      let left = 0;
      for (let i = 0; i < records.length; i += config.batchSize) {
        await Promise.all(
          records.slice(i, i + config.batchSize).map(async (bytes, k) => {
            let error: string | undefined;
            try {
              const header = readHeader(bytes);
              error = await enqueue(ae, {
                name: `${ae} spool ${name} #${i + k}`,
                header,
                bytes: () => Promise.resolve(bytes),
              });
            } catch (err) {
              error = err instanceof Error ? err.message : String(err);
            }
            if (error === undefined) filed++;
            else {
              failed++;
              left++;
              log.warn({ ae, file: name, error }, "DICOM receiver: a spooled instance could not be filed; it stays");
            }
          }),
        );
      }
      // Filed again at the next start when some of it could not be (what was filed is then found there).
      if (left === 0) await rm(path, { force: true });
    }
    if (filed > 0)
      await settling(ae).catch((err: unknown) =>
        log.warn({ err, ae }, "DICOM receiver: updating instance counts failed"),
      );
    if (filed + failed > 0) log.info({ ae, filed, failed }, "DICOM receiver: filed what the spool held at start-up");
  }

  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    // A C-STORE answer is a small write after a small read: without this, Nagle's algorithm holds it for the sender's delayed ACK.
    socket.setNoDelay(true);
    socket.on("close", () => sockets.delete(socket));
    const scp = new ReceiverScp(socket, { associationTimeout: 60_000, pduTimeout: 60_000 }) as unknown as {
      connected: boolean;
      on(event: "networkError", listener: () => void): void;
    };
    scp.connected = true;
    scp.on("networkError", () => socket.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(config.port, config.host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : config.port;
  log.info(
    { port, host: config.host, aeTitle: config.aeTitle, datasource: config.datasource },
    "DICOM receiver listening",
  );
  return {
    port,
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      });
      for (const f of filers.values()) f.close();
      for (const lane of lanes.values()) await (await lane.spool.catch(() => undefined))?.close();
    },
  };
}
