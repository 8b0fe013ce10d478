// The read audit's edges (docs/contract/19-audit-history.md).
// A line never holds a filter's value, an external uid, an object path or a
// cursor (a scan of every line for planted markers); `ok` only for a call
// that answered (a stream refused before its first message says how it was
// refused); presigned downloads, parquet previews and listings are audited;
// so are calls refused by authentication, by scope and by grants; every
// line carries the caller's address and the `as_of` asked; an AUDIT_LOG
// that cannot be written fails start-up and readiness with a log line.
// Each check failed on the code before those edges were fixed.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";
import { QueryService } from "../../gen/resourcestore/v2/query_service_pb.js";
import { ResourceService } from "../../gen/resourcestore/v2/resource_service_pb.js";
import { createApp } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { logLines } from "../support/log-lines.js";
import { writeFixture } from "../storage/parquet-fixture.js";

const ACC = "ACC-MARKER-5521";
const UID = "UID-MARKER-7310";
const PATH_MARK = "PATHMARK9904";
const SECRET = "PAYLOAD-MARKER-3378";

interface Line {
  at: string;
  actor: string | null;
  method: string;
  request_id: string | null;
  address: string | null;
  as_of: string | null;
  outcome: string;
  identifiers?: string[];
  request?: Record<string, unknown>;
  count: number | null;
}

type Wire = "connect" | "grpc" | "grpc-web";
const WIRES: readonly Wire[] = ["connect", "grpc", "grpc-web"];
function transportOf(srv: TestServer, wire: Wire): Transport {
  if (wire === "grpc") return createGrpcTransport({ baseUrl: srv.url });
  if (wire === "grpc-web") return createGrpcWebTransport({ baseUrl: srv.url, httpVersion: "1.1" });
  return createConnectTransport({ baseUrl: srv.url, httpVersion: "1.1" });
}

/** Reads a stream to its end or error: the messages taken and the error's code name, if any. */
async function drain(stream: AsyncIterable<unknown>): Promise<{ messages: number; error: ConnectError | undefined }> {
  let messages = 0;
  try {
    for await (const _ of stream) messages++;
    return { messages, error: undefined };
  } catch (err) {
    if (!(err instanceof ConnectError)) throw err;
    return { messages, error: err };
  }
}

describe("read audit edges (issue 41)", () => {
  let srv: TestServer;
  const written: string[] = [];
  const lines = (): Line[] => written.map((l) => JSON.parse(l) as Line);
  const call = async (token: string, method: "GET" | "POST", path: string, body?: unknown) => {
    const res = await fetch(srv.url + path, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = Buffer.from(await res.arrayBuffer()).toString("latin1");
    return { status: res.status, text };
  };
  /** The lines a call added. */
  const linesOf = async (run: () => Promise<unknown>): Promise<Line[]> => {
    const before = written.length;
    await run();
    return lines().slice(before);
  };
  const oneLine = async (run: () => Promise<unknown>): Promise<Line> => {
    const added = await linesOf(run);
    expect(added).toHaveLength(1);
    return added[0] as Line;
  };
  let filePath = "";

  beforeAll(async () => {
    srv = await startTestServer(
      { API_TOKENS: "tok-all=read,write,actor:auditor;tok-a=read,datasource:ds-a,clearance:internal,actor:narrow" },
      {
        auditSink: (line) => {
          written.push(line);
          return Promise.resolve();
        },
      },
    );
    const up = JSON.parse(
      (
        await call("tok-all", "POST", "/s3/presign", {
          direction: "upload",
          group: "audit",
          filename: `${PATH_MARK}.parquet`,
        })
      ).text,
    ) as {
      url: string;
      path: string;
    };
    expect((await fetch(up.url, { method: "PUT", body: writeFixture(12, 4).bytes })).status).toBe(200);
    filePath = up.path;
    const created = await call("tok-all", "POST", "/resources/create", {
      resources: [
        { identifier: "ds-a", payload_type: "datasource", name: "A" },
        {
          identifier: "pa-a",
          payload_type: "patient",
          parent_identifier: "ds-a",
          datasource_id: "ds-a",
          access_level: "internal",
        },
        {
          identifier: "st-1",
          payload_type: "study",
          parent_identifier: "pa-a",
          accession_number: ACC,
          description: SECRET,
          access_level: "internal",
        },
        {
          identifier: "st-2",
          payload_type: "study",
          parent_identifier: "pa-a",
          accession_number: `${ACC}-2`,
          access_level: "internal",
        },
        {
          identifier: "fi-1",
          payload_type: "dataset",
          parent_identifier: "st-1",
          name: "d",
          path: filePath,
          access_level: "internal",
        },
      ],
    });
    expect(created.status, created.text).toBe(200);
    expect(
      (await call("tok-all", "POST", "/patients/register", { datasource_id: "ds-a", external_uid: UID })).status,
    ).toBe(200);
  }, 60_000);
  afterAll(async () => srv?.close());

  it("7: a query, count or export line names the filters' fields, never their values, and a cursor only as given", async () => {
    const q = {
      payload_type: "study",
      filters: [
        { field: "accession_number", op: "eq", value: ACC },
        { any: [{ field: "description", op: "contains", value: SECRET }] },
      ],
    };
    const fields = [{ field: "accession_number", op: "eq" }, { any: [{ field: "description", op: "contains" }] }];
    for (const path of ["/query", "/query/count", "/query/parquet"]) {
      const line = await oneLine(() => call("tok-all", "POST", path, q));
      expect(line.outcome, path).toBe("ok");
      expect(line.request, path).toEqual({ payload_type: "study", filters: fields });
    }
    const first = JSON.parse((await call("tok-all", "POST", "/query", { payload_type: "study", limit: 1 })).text) as {
      next_cursor: string;
    };
    expect(typeof first.next_cursor).toBe("string");
    const next = await oneLine(() =>
      call("tok-all", "POST", "/query", { payload_type: "study", limit: 1, cursor: first.next_cursor }),
    );
    expect(next.request).toEqual({ payload_type: "study", limit: 1, cursor: true });
    expect(written.join("")).not.toContain(first.next_cursor);
  });

  for (const wire of WIRES) {
    it(`8: a stream refused before its first message is audited with its refusal, never ok, over ${wire}`, async () => {
      const t = transportOf(srv, wire);
      const h = { headers: { authorization: "Bearer tok-all" } };
      const narrow = { headers: { authorization: "Bearer tok-a" } };
      const q = createClient(QueryService, t);
      const page = await q.query({ payloadType: "study", limit: 1 }, h);
      expect(page.nextCursor).toBeDefined();
      const refusals: [string, () => AsyncIterable<unknown>][] = [
        // A cursor taken under other grants.
        [
          "foreign cursor",
          () => q.queryParquet({ payloadType: "study", limit: 1, cursor: page.nextCursor ?? "" }, narrow),
        ],
        [
          "unknown field",
          () => q.queryParquet({ payloadType: "study", filters: [{ field: "no_such_field", op: "eq" }] }, h),
        ],
        ["bad since", () => createClient(EventService, t).watch({ since: "yesterday" }, h)],
      ];
      for (const [name, stream] of refusals) {
        let result: Awaited<ReturnType<typeof drain>> | undefined;
        const line = await oneLine(async () => (result = await drain(stream())));
        expect(result?.messages, name).toBe(0);
        expect(result?.error, name).toBeInstanceOf(ConnectError);
        expect(line.outcome, name).toBe("invalid_argument");
      }
      // One that answers is ok.
      const good = await oneLine(() => drain(q.queryParquet({ payloadType: "study" }, h)));
      expect(good.outcome).toBe("ok");
    });
  }

  it("8: a refused export or feed over REST is audited with its refusal", async () => {
    const line = await oneLine(() =>
      call("tok-all", "POST", "/query/parquet", {
        payload_type: "study",
        filters: [{ field: "no_such_field", op: "eq", value: 1 }],
      }),
    );
    expect(line.outcome).toBe("invalid_argument");
    const feed = await oneLine(() => call("tok-all", "GET", "/events?since=yesterday"));
    expect(feed).toMatchObject({ method: "resourcestore.v2.EventService/Watch", outcome: "invalid_argument" });
  });

  it("9: presigned downloads, batches, parquet previews and listings are audited with a count, never a path", async () => {
    const one = await oneLine(() => call("tok-all", "POST", "/s3/presign", { direction: "download", path: filePath }));
    expect(one).toMatchObject({
      method: "resourcestore.v2.StorageService/Presign",
      actor: "auditor",
      outcome: "ok",
      count: 1,
      request: { direction: "download" },
    });
    const batch = await oneLine(() =>
      call("tok-all", "POST", "/s3/presign/batch", {
        direction: "download",
        items: [{ path: filePath }, { path: filePath }],
      }),
    );
    expect(batch).toMatchObject({ method: "resourcestore.v2.StorageService/PresignBatch", outcome: "ok", count: 2 });
    const preview = await oneLine(() =>
      call("tok-a", "GET", `/s3/parquet?path=${encodeURIComponent(filePath)}&limit=5`),
    );
    expect(preview).toMatchObject({
      method: "resourcestore.v2.StorageService/ParquetPreview",
      actor: "narrow",
      outcome: "ok",
      count: 5,
    });
    const listed = await oneLine(() =>
      call("tok-all", "GET", `/s3/list?prefix=${encodeURIComponent(filePath.slice(0, filePath.lastIndexOf("/") + 1))}`),
    );
    expect(listed).toMatchObject({ method: "resourcestore.v2.StorageService/List", outcome: "ok", count: 1 });
    // Refused for a narrow caller: still a line, with how it ended.
    const refused = await oneLine(() => call("tok-a", "GET", `/s3/list?prefix=${encodeURIComponent(filePath)}`));
    expect(refused).toMatchObject({ actor: "narrow", outcome: "not_found", count: 0 });
    // An upload reads nothing: no line.
    expect(
      await linesOf(() =>
        call("tok-all", "POST", "/s3/presign", { direction: "upload", group: "audit", filename: "x" }),
      ),
    ).toEqual([]);
  });

  it("9: calls refused by authentication, by scope and by grants are audited, with the caller's address", async () => {
    const unauth = await oneLine(() => call("tok-nobody", "POST", "/resources/read", { identifiers: ["st-1"] }));
    expect(unauth).toMatchObject({
      method: "resourcestore.v2.ResourceService/Read",
      actor: null,
      outcome: "unauthenticated",
      count: 0,
    });
    expect(unauth.address).toMatch(/127\.0\.0\.1/);
    // Register needs write; a reader is refused by scope, inside the interceptors, once its token
    // authenticated: the line names its actor (test/history/audit-reads.test.ts: every read, every surface).
    const scope = await oneLine(() =>
      call("tok-a", "POST", "/patients/register", { datasource_id: "ds-a", external_uid: `${UID}-2` }),
    );
    expect(scope).toMatchObject({
      method: "resourcestore.v2.RegistryService/RegisterPatient",
      actor: "narrow",
      outcome: "permission_denied",
      count: 0,
    });
    expect(scope.address).toMatch(/127\.0\.0\.1/);
    const grants = await oneLine(() => call("tok-a", "POST", "/resources/history", { identifier: "no-such" }));
    expect(grants).toMatchObject({ actor: "narrow", outcome: "not_found" });
    for (const wire of WIRES) {
      const c = createClient(ResourceService, transportOf(srv, wire));
      const err = await c.read({ identifiers: ["st-1"] }, { headers: { authorization: "Bearer tok-nobody" } }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, wire).toBeInstanceOf(ConnectError);
      expect(lines().at(-1), wire).toMatchObject({ actor: null, outcome: "unauthenticated" });
    }
  });

  it("9: every line carries the address and the as_of asked", async () => {
    const at = new Date().toISOString();
    const rest = await oneLine(() => call("tok-a", "POST", "/resources/read", { identifiers: ["st-1"], as_of: at }));
    expect(rest).toMatchObject({ as_of: at, identifiers: ["st-1"] });
    expect(rest.address).toMatch(/127\.0\.0\.1/);
    for (const wire of WIRES) {
      const c = createClient(QueryService, transportOf(srv, wire));
      const line = await oneLine(() =>
        c.count({ payloadType: "study", asOf: at }, { headers: { authorization: "Bearer tok-a" } }),
      );
      expect(line.as_of, wire).toBe(at);
      expect(line.address, wire).toMatch(/127\.0\.0\.1/);
      const exp = await oneLine(() =>
        drain(c.queryParquet({ payloadType: "study" }, { headers: { authorization: "Bearer tok-a" } })),
      );
      expect([exp.as_of, exp.address?.includes("127.0.0.1")], wire).toEqual([null, true]);
    }
    // A REST stream runs in process: its address comes from the request all the same.
    const exp = await oneLine(() => call("tok-a", "POST", "/query/parquet", { payload_type: "study" }));
    expect(exp.address).toMatch(/127\.0\.0\.1/);
    const now = await oneLine(() => call("tok-a", "POST", "/resources/read", { identifiers: ["st-1"] }));
    expect(now.as_of).toBeNull();
  });

  it("7, 9: no line holds a payload value, an external uid, an object path or a cursor", () => {
    const text = written.join("");
    expect(written.length).toBeGreaterThan(30);
    for (const marker of [ACC, SECRET, UID, PATH_MARK, "s3://"]) expect(text, marker).not.toContain(marker);
    for (const l of lines()) {
      expect(typeof l.method).toBe("string");
      expect("address" in l && "as_of" in l).toBe(true);
    }
  });
});

describe("an AUDIT_LOG that cannot be written (issue 41, item 10)", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "rs-audit-path-"));
  });
  afterAll(async () => rm(dir, { recursive: true, force: true }));

  it("fails start-up with a log line saying why", async () => {
    const log = logLines("info");
    const config = loadConfig({
      PORT: "0",
      HOST: "127.0.0.1",
      DATA_DIR: dir,
      LOG_LEVEL: "info",
      AUDIT_LOG: join(dir, "missing", "audit.log"),
    });
    await expect(createApp(config, log.logger)).rejects.toThrow(/AUDIT_LOG/);
    expect(log.records().some((r) => r.level === 50 && String(r.msg).includes("AUDIT_LOG"))).toBe(true);
  });

  it("fails readiness when it stops being writable, with a log line", async () => {
    const logDir = join(dir, "logs");
    const { mkdir } = await import("node:fs/promises");
    await mkdir(logDir);
    const log = logLines("info");
    const srv = await startTestServer({ AUDIT_LOG: join(logDir, "audit.log"), LOG_LEVEL: "info" }, {}, log.logger);
    try {
      expect((await fetch(`${srv.url}/readyz`)).status).toBe(200);
      await rm(logDir, { recursive: true, force: true });
      expect((await fetch(`${srv.url}/readyz`)).status).toBe(503);
      expect(
        log
          .records()
          .some((r) => r.level === 50 && String(r.msg).includes("AUDIT_LOG") && String(r.msg).includes("not ready")),
      ).toBe(true);
      await mkdir(logDir);
      expect((await fetch(`${srv.url}/readyz`)).status).toBe(200);
    } finally {
      await srv.close();
    }
  });
});
