// The DICOM receiver: with DICOM_PORT set the service also listens as a
// C-STORE and C-ECHO SCP (dcmjs-dimse speaks DIMSE). What arrives is filed by
// the filer `import-dicom` uses (filer.ts), through the service's own API in
// process (App.localTransport, the same pipeline as every call) as the caller
// `dicom:<calling AE title>`, so a study sent by a modality and the same
// files imported from a folder make the same tree. A C-STORE is answered
// Success only once its object and its file resource are in the store.
import net from "node:net";
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
const { Status, PresentationContextResult, RejectResult, RejectSource, RejectReason, TransferSyntax, SopClass } =
  dimse.constants;
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

interface Queued {
  readonly ae: string;
  readonly instance: Instance;
  done(error: string | undefined): void;
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
  // Lanes of different senders run side by side. When two batches meet on a
  // patient, study or series being created, the loser's create is refused
  // (all or nothing) and its batch is filed again, finding what the other made.
  interface Lane {
    readonly queue: Queued[];
    /** Batches being filed now: up to LANE_BATCHES, so a batch's round trips overlap the next one's. */
    running: number;
    settled: Promise<void>;
  }
  const lanes = new Map<string, Lane>();
  const laneOf = (ae: string): Lane => {
    let lane = lanes.get(ae);
    if (lane === undefined) {
      lane = { queue: [], running: 0, settled: Promise.resolve() };
      lanes.set(ae, lane);
    }
    return lane;
  };
  async function drain(ae: string): Promise<void> {
    const lane = laneOf(ae);
    if (lane.running >= LANE_BATCHES) return;
    lane.running++;
    try {
      const filer = filerFor(ae);
      while (lane.queue.length > 0) {
        const batch = lane.queue.splice(0, config.batchSize);
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
  // Settles one sender's filer once what it sent is filed, one settle at a time.
  const settling = (ae: string): Promise<void> => {
    const lane = laneOf(ae);
    lane.settled = lane.settled
      .catch(() => {})
      .then(async () => {
        while (lane.running > 0 || lane.queue.length > 0) await new Promise((r) => setTimeout(r, 5));
        await filerFor(ae).settle();
      });
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

    // The end of an association is where a sender's study is complete: instance
    // counts and study modalities are brought up to date before the release is
    // answered (not after every batch, which would cost a count per series).
    override associationReleaseRequested(): void {
      const ae = this.callingAe;
      const settle = (this.received > 0 ? settling(ae) : Promise.resolve()).catch((err: unknown) =>
        log.warn({ err, ae }, "DICOM receiver: updating instance counts failed"),
      );
      void settle.then(() => this.sendAssociationReleaseResponse());
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
      void enqueue(ae, { name: `${ae} #${n}`, header, bytes: () => Promise.resolve(bytes) }).then((error) => {
        if (error === undefined) reply(Status.Success);
        else {
          log.warn({ ae, error }, "DICOM receiver: instance not filed");
          reply(Status.ProcessingFailure, error);
        }
      });
    }
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
    },
  };
}
