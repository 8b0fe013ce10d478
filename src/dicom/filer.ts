// Files DICOM instances into the store through its public API only, the same
// way for `resource-store import-dicom` and for the receiver (receiver.ts):
// the registry turns PatientID (+IssuerOfPatientID) and StudyInstanceUID into
// opaque identifiers, patient, study, series and file resources are created
// with payloads read from the headers, and each object goes to object storage
// through a presigned URL. Everything is derived from the UIDs, so filing the
// same instance again finds it and does nothing: reruns, resumed runs and a
// study sent twice leave one copy.
//
// Nothing direct goes into a payload, an identifier or an object key:
// patient and study identifiers are the registry's random ones, series and
// file identifiers and keys are hashes under the study's identifier.
import { createHash } from "node:crypto";
import http from "node:http";
import https from "node:https";
import { Code, ConnectError } from "@connectrpc/connect";
import type { ResourceStoreClient } from "../client/index.js";
import type { InstanceHeader } from "./header.js";

export type FilerClient = Pick<ResourceStoreClient, "resources" | "query" | "registry" | "storage">;

export type AccessLevel = "public" | "internal" | "restricted";

export interface FilerOptions {
  readonly datasource: string;
  readonly accessLevel: AccessLevel;
  /** With a key, stored headers are rewritten by the basic profile (deidentify.ts). */
  readonly deidentifyKey?: Buffer;
  /** PUTs at once. */
  readonly concurrency: number;
  /** Retries of a PUT that failed on the network or with 5xx/429. */
  readonly retries: number;
}

/** One instance to file: its header, and its bytes when they are needed (read late, so a batch holds no more than `concurrency` objects). */
export interface Instance {
  /** How messages name it (a relative path, or `<calling AE> #n`). */
  readonly name: string;
  readonly header: InstanceHeader;
  bytes(): Promise<Buffer>;
}

export type Outcome = { kind: "stored"; bytes: number } | { kind: "present" } | { kind: "failed"; error: string };

export interface Filer {
  /** Files a batch; one outcome per instance, in order. Throws only when nothing of the batch could be decided. */
  file(batch: readonly Instance[], onBytes?: (n: number) => void): Promise<Outcome[]>;
  /** Brings instance counts (series) and modalities (studies) up to date for what the batches since the last call touched. */
  settle(): Promise<void>;
  /** Closes its connections to object storage. */
  close(): void;
}

const CONTENT_TYPE = "application/dicom";

function hex(...parts: string[]): string {
  return createHash("sha256").update(parts.join("\n")).digest("hex");
}

/** A datasource id as an object key segment: as it is when it is one, else a hash of it. */
function keySegment(datasource: string): string {
  return /^[A-Za-z0-9._-]+$/.test(datasource) && datasource !== "." && datasource !== ".."
    ? datasource
    : `ds-${hex(datasource).slice(0, 24)}`;
}

function seriesIdentifier(study: string, seriesUid: string): string {
  return `ser-${hex("series", study, seriesUid).slice(0, 32)}`;
}

function fileIdentifier(study: string, sopUid: string): string {
  return `dcm-${hex("instance", study, sopUid).slice(0, 40)}`;
}

/** The registry key of a patient: PatientID with its issuer; without a PatientID, one patient per study. */
function patientUid(h: InstanceHeader): string {
  return h.patientId !== undefined
    ? `dicom-patient:${JSON.stringify([h.issuerOfPatientId ?? "", h.patientId])}`
    : `dicom-study-without-patient:${h.studyInstanceUid}`;
}

function isFailedPrecondition(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.FailedPrecondition;
}

class PutError extends Error {
  constructor(
    message: string,
    readonly retriable: boolean,
  ) {
    super(message);
  }
}

function put(url: string, body: Buffer, agents: { http: http.Agent; https: https.Agent }): Promise<void> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const secure = target.protocol === "https:";
    const req = (secure ? https : http).request(target, {
      method: "PUT",
      agent: secure ? agents.https : agents.http,
      headers: { "content-length": String(body.length), "content-type": CONTENT_TYPE },
    });
    req.on("error", (err) => reject(new PutError(err.message, true)));
    req.on("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => {
        if (text.length < 500) text += d;
      });
      res.on("error", (err) => reject(new PutError(err.message, true)));
      res.on("end", () => {
        const status = res.statusCode ?? 0;
        if (status >= 200 && status < 300) resolve();
        else
          reject(
            new PutError(
              `storage answered ${status}${text !== "" ? `: ${text.slice(0, 200)}` : ""}`,
              status >= 500 || status === 429 || status === 408,
            ),
          );
      });
    });
    req.end(body);
  });
}

function message(err: unknown): string {
  if (err instanceof ConnectError) return err.rawMessage;
  return err instanceof Error ? err.message : String(err);
}

interface Placed {
  readonly instance: Instance;
  readonly patient: string;
  readonly study: string;
  readonly series: string;
  readonly file: string;
  readonly relpath: string;
}

export function createFiler(client: FilerClient, opts: FilerOptions): Filer {
  const group = `dicom/${keySegment(opts.datasource)}`;
  let bucket: string | undefined;
  // Registry answers and resources known to be active: O(patients + studies + series), never O(files).
  const patients = new Map<string, Promise<string>>();
  const studies = new Map<string, Promise<string>>();
  const known = new Set<string>();
  /** The last hierarchy create of this filer: the next one waits for it. */
  let creating: Promise<void> = Promise.resolve();
  let datasourceParent: Promise<string | undefined> | undefined;
  const touchedSeries = new Set<string>();
  const touchedStudies = new Set<string>();
  const agents = {
    http: new http.Agent({ keepAlive: true, maxSockets: opts.concurrency }),
    https: new https.Agent({ keepAlive: true, maxSockets: opts.concurrency }),
  };

  /** Resolve, else register, else (another importer registered it meanwhile) resolve again. */
  async function allocate(
    resolve: () => Promise<{ identifier: string }>,
    register: () => Promise<{ identifier: string }>,
  ): Promise<string> {
    try {
      return (await resolve()).identifier;
    } catch (err) {
      if (!isFailedPrecondition(err)) throw err;
    }
    try {
      return (await register()).identifier;
    } catch (err) {
      if (!isFailedPrecondition(err)) throw err;
      return (await resolve()).identifier;
    }
  }

  function patientOf(h: InstanceHeader): Promise<string> {
    const uid = patientUid(h);
    let p = patients.get(uid);
    if (p === undefined) {
      const req = { datasourceId: opts.datasource, externalUid: uid };
      p = allocate(
        () => client.registry.resolvePatient(req),
        () => client.registry.registerPatient(req),
      );
      patients.set(uid, p);
      p.catch(() => patients.delete(uid));
    }
    return p;
  }

  function studyOf(patient: string, h: InstanceHeader): Promise<string> {
    const key = `${patient}\n${h.studyInstanceUid}`;
    let p = studies.get(key);
    if (p === undefined) {
      const req = { patientIdentifier: patient, externalUid: h.studyInstanceUid };
      p = allocate(
        () => client.registry.resolveStudy(req),
        () => client.registry.registerStudy(req),
      );
      studies.set(key, p);
      p.catch(() => studies.delete(key));
    }
    return p;
  }

  /** Patients hang under the datasource resource when there is one (a `datasource` named by the id). */
  function parentOfPatients(): Promise<string | undefined> {
    if (datasourceParent === undefined) {
      const p = client.resources
        .read({ identifiers: [opts.datasource], excludeChildren: true })
        .then((r) =>
          r.resources.some((x) => x.identifier === opts.datasource && x.payload.case === "datasource")
            ? opts.datasource
            : undefined,
        );
      datasourceParent = p;
      p.catch(() => (datasourceParent = undefined));
    }
    return datasourceParent;
  }

  async function activeOf(identifiers: string[]): Promise<Set<string>> {
    const active = new Set<string>();
    const ask = identifiers.filter((id) => !known.has(id));
    for (let i = 0; i < ask.length; i += 1000) {
      const r = await client.resources.read({ identifiers: ask.slice(i, i + 1000), excludeChildren: true });
      for (const x of r.resources) active.add(x.identifier);
    }
    for (const id of identifiers) if (known.has(id)) active.add(id);
    return active;
  }

  async function send(url: string, body: Buffer): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await put(url, body, agents);
      } catch (err) {
        if (!(err instanceof PutError) || !err.retriable || attempt >= opts.retries) throw err;
        await new Promise((r) => setTimeout(r, Math.min(4000, 200 * 2 ** attempt)));
      }
    }
  }

  async function file(batch: readonly Instance[], onBytes?: (n: number) => void): Promise<Outcome[]> {
    const outcomes: (Outcome | undefined)[] = new Array<Outcome | undefined>(batch.length);
    bucket ??= (await client.storage.config({})).s3Bucket;
    const parent = await parentOfPatients();

    // 1. Where each instance goes.
    const placed: (Placed | undefined)[] = await Promise.all(
      batch.map(async (instance, i) => {
        try {
          const h = instance.header;
          const patient = await patientOf(h);
          const study = await studyOf(patient, h);
          const series = seriesIdentifier(study, h.seriesInstanceUid);
          const fileId = fileIdentifier(study, h.sopInstanceUid);
          return { instance, patient, study, series, file: fileId, relpath: `${series}/${fileId}.dcm` };
        } catch (err) {
          outcomes[i] = { kind: "failed", error: `registry: ${message(err)}` };
          return undefined;
        }
      }),
    );

    // 2. What exists already: the hierarchy is created once, a file already there is not sent again.
    const firstOf = new Map<string, Placed>();
    const uniqueFiles = new Map<string, number>();
    placed.forEach((p, i) => {
      if (p === undefined) return;
      for (const id of [p.patient, p.study, p.series]) if (!firstOf.has(id)) firstOf.set(id, p);
      // The same instance twice in one batch: filed once.
      if (uniqueFiles.has(p.file)) outcomes[i] = { kind: "present" };
      else uniqueFiles.set(p.file, i);
    });
    const active = await activeOf([...firstOf.keys(), ...uniqueFiles.keys()]);
    for (const [id, i] of uniqueFiles) if (active.has(id)) outcomes[i] = { kind: "present" };

    const level = opts.accessLevel;
    const missing = [...firstOf.entries()].filter(([id]) => !active.has(id));
    const hierarchy = () =>
      missing
        .filter(([id]) => !known.has(id))
        .map(([id, p]) => {
          const h = p.instance.header;
          if (id === p.patient) {
            return {
              identifier: id,
              ...(parent !== undefined ? { parentIdentifier: parent } : {}),
              accessLevel: level,
              payload: {
                case: "patient" as const,
                value: { datasourceId: opts.datasource, sex: h.sex, birthYear: h.birthYear },
              },
            };
          }
          if (id === p.study) {
            return {
              identifier: id,
              parentIdentifier: p.patient,
              accessLevel: level,
              payload: {
                case: "study" as const,
                value: {
                  studyDate: h.studyDate,
                  modality: h.modality,
                  description: h.studyDescription,
                  bodyPart: h.bodyPart,
                },
              },
            };
          }
          return {
            identifier: id,
            parentIdentifier: p.study,
            accessLevel: level,
            payload: {
              case: "series" as const,
              value: {
                modality: h.modality,
                seriesNumber: h.seriesNumber,
                description: h.seriesDescription,
                instanceCount: 0,
              },
            },
          };
        });
    // One hierarchy create at a time: batches filed side by side (the receiver's) would otherwise both
    // create a new patient, study or series and one of them be refused; the later one finds it known.
    if (missing.length > 0) {
      const run = creating.then(async () => {
        const resources = hierarchy();
        if (resources.length > 0) await client.resources.create({ resources });
        for (const [id] of missing) known.add(id);
      });
      creating = run.catch(() => {});
      await run;
    }
    for (const id of firstOf.keys()) known.add(id);

    // 3. Objects: one presign call per study (a fresh upload root each: a root is resumed only by the
    // caller that started it, docs/contract/18-access.md), then the PUTs, `concurrency` at once. A file
    // already active is never uploaded again, so a rerun uploads only what no file resource names yet.
    const todo = [...uniqueFiles.entries()].filter(([id]) => !active.has(id)).map(([, i]) => ({ i, p: placed[i]! }));
    const byStudy = new Map<string, { i: number; p: Placed }[]>();
    for (const t of todo) {
      const list = byStudy.get(t.p.study) ?? [];
      list.push(t);
      byStudy.set(t.p.study, list);
    }
    const jobs: { i: number; p: Placed; url: string; path: string }[] = [];
    const signed = await Promise.all(
      [...byStudy].map(async ([, list]) => ({
        list,
        res: await client.storage.presignUploadDir({ group, relpaths: list.map((t) => t.p.relpath) }),
      })),
    );
    for (const { list, res } of signed)
      list.forEach((t, k) => jobs.push({ ...t, url: res.items[k]!.url, path: res.items[k]!.path ?? "" }));
    const files: { i: number; p: Placed; path: string; size: number; sha256: string }[] = [];
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < jobs.length) {
        const job = jobs[next++]!;
        try {
          let body = await job.p.instance.bytes();
          // Loaded only here: dcmjs is needed by --deidentify alone.
          if (opts.deidentifyKey !== undefined)
            body = (await import("./deidentify.js")).deidentify(body, opts.deidentifyKey);
          await send(job.url, body);
          onBytes?.(body.length);
          files.push({
            i: job.i,
            p: job.p,
            path: job.path,
            size: body.length,
            sha256: createHash("sha256").update(body).digest("hex"),
          });
        } catch (err) {
          outcomes[job.i] = { kind: "failed", error: message(err) };
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(opts.concurrency, Math.max(jobs.length, 1)) }, worker));

    // 4. The file resources, after their objects: a file resource always names an object that is there.
    if (files.length > 0) {
      files.sort((x, y) => x.i - y.i);
      const create = (list: typeof files) =>
        client.resources.create({
          resources: list.map((f) => ({
            identifier: f.p.file,
            parentIdentifier: f.p.series,
            accessLevel: level,
            payload: {
              case: "file" as const,
              value: { path: f.path, sizeBytes: BigInt(f.size), contentType: CONTENT_TYPE, sha256: f.sha256 },
            },
          })),
        });
      let created = files;
      try {
        await create(files);
      } catch (err) {
        if (!isFailedPrecondition(err)) throw err;
        // A batch filed beside it (the same instance in two files, or sent twice at once) created some of them
        // first, and a create is all or nothing: those are there, the rest is created now.
        const there = await activeOf(files.map((f) => f.p.file));
        created = files.filter((f) => !there.has(f.p.file));
        for (const f of files) if (there.has(f.p.file)) outcomes[f.i] = { kind: "present" };
        if (created.length > 0) await create(created);
      }
      for (const f of created) {
        outcomes[f.i] = { kind: "stored", bytes: f.size };
        touchedSeries.add(f.p.series);
        touchedStudies.add(f.p.study);
      }
    }
    return outcomes.map((o) => o ?? { kind: "failed", error: "not filed" });
  }

  async function settle(): Promise<void> {
    const series = [...touchedSeries];
    const studyIds = [...touchedStudies];
    touchedSeries.clear();
    touchedStudies.clear();
    const updates: Record<
      string,
      {
        payload: { case: "series"; value: { instanceCount: number } } | { case: "study"; value: { modality: string } };
        updateMask: { paths: string[] };
      }
    > = {};
    for (const id of series) {
      const [count, current] = await Promise.all([
        client.query.count({ parentIdentifier: id, payloadType: "file" }),
        client.resources.read({ identifiers: [id], excludeChildren: true }),
      ]);
      const r = current.resources[0];
      const n = Number(count.count);
      if (r?.payload.case === "series" && r.payload.value.instanceCount !== n) {
        updates[id] = {
          payload: { case: "series", value: { instanceCount: n } },
          updateMask: { paths: ["instance_count"] },
        };
      }
    }
    for (const id of studyIds) {
      // ModalitiesInStudy: the distinct modalities of its series, sorted, joined by "\".
      const [page, current] = await Promise.all([
        client.query.query({ parentIdentifier: id, payloadType: "series", selectColumns: ["modality"], limit: 1000 }),
        client.resources.read({ identifiers: [id], excludeChildren: true }),
      ]);
      const distinct = new Set<string>();
      for (const s of page.results)
        if (s.payload.case === "series" && s.payload.value.modality) distinct.add(s.payload.value.modality);
      const modalities = [...distinct].sort();
      const r = current.resources[0];
      const joined = modalities.join("\\");
      if (joined !== "" && r?.payload.case === "study" && r.payload.value.modality !== joined) {
        updates[id] = { payload: { case: "study", value: { modality: joined } }, updateMask: { paths: ["modality"] } };
      }
    }
    if (Object.keys(updates).length > 0) await client.resources.update({ updates });
  }

  return {
    file,
    settle,
    close() {
      agents.http.destroy();
      agents.https.destroy();
    },
  };
}
