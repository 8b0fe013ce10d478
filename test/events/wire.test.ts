// The change feed on every surface (gRPC, gRPC-Web, Connect binary and JSON,
// REST Server-Sent Events over HTTP/1.1 and HTTP/2), both revisions, both
// backends: the same events, whole commits, heartbeats while idle,
// Last-Event-ID honoured, a bad request answered before the stream opens.
import { connect } from "node:http2";
import { createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WatchResponse } from "../../gen/resourcestore/type/v1/event_pb.js";
import { EventService as EventServiceV1 } from "../../gen/resourcestore/v1/event_service_pb.js";
import { EventService as EventServiceV2 } from "../../gen/resourcestore/v2/event_service_pb.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";

const pgOk = await postgresReachable();

type Sse = { id?: string; data?: unknown; heartbeat: boolean };

/** Reads SSE frames from a byte stream until `enough` says so. */
async function readSse(chunks: AsyncIterable<Uint8Array | string>, enough: (frames: Sse[]) => boolean): Promise<Sse[]> {
  const frames: Sse[] = [];
  let buf = "";
  for await (const chunk of chunks) {
    buf += typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8");
    let end: number;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const frame: Sse = { heartbeat: false };
      for (const line of block.split("\n")) {
        if (line.startsWith("id: ")) frame.id = line.slice(4);
        else if (line.startsWith("data: ")) frame.data = JSON.parse(line.slice(6));
        else if (line === ": heartbeat") frame.heartbeat = true;
      }
      frames.push(frame);
      if (enough(frames)) return frames;
    }
  }
  return frames;
}

async function sseOverHttp1(
  url: string,
  headers: Record<string, string>,
  enough: (f: Sse[]) => boolean,
): Promise<{ status: number; type: string | null; frames: Sse[]; text?: string }> {
  const ac = new AbortController();
  const res = await fetch(url, { headers, signal: ac.signal });
  if (res.status !== 200)
    return { status: res.status, type: res.headers.get("content-type"), frames: [], text: await res.text() };
  const frames = await readSse(res.body as unknown as AsyncIterable<Uint8Array>, enough);
  ac.abort();
  return { status: res.status, type: res.headers.get("content-type"), frames };
}

async function sseOverHttp2(
  base: string,
  path: string,
  enough: (f: Sse[]) => boolean,
): Promise<{ status: number; frames: Sse[] }> {
  const session = connect(base);
  try {
    const req = session.request({ ":method": "GET", ":path": path });
    const status = await new Promise<number>((resolve, reject) => {
      req.once("response", (h) => resolve(Number(h[":status"])));
      req.once("error", reject);
    });
    req.setEncoding("utf8");
    const frames = await readSse(req as AsyncIterable<string>, enough);
    req.close();
    return { status, frames };
  } finally {
    session.close();
  }
}

const transports: Record<string, (url: string) => Transport> = {
  grpc: (baseUrl) => createGrpcTransport({ baseUrl }),
  "grpc-web": (baseUrl) => createGrpcWebTransport({ baseUrl, httpVersion: "1.1" }),
  "connect-json": (baseUrl) => createConnectTransport({ baseUrl, httpVersion: "1.1" }),
  "connect-binary": (baseUrl) => createConnectTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true }),
};

const post = async (srv: TestServer, path: string, body: unknown) => {
  const r = await fetch(srv.url + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  expect(r.status).toBe(200);
  return r.json() as Promise<Record<string, unknown>>;
};

for (const backend of ["pglite", "postgres"] as const) {
  describe.skipIf(backend === "postgres" && !pgOk)(`events on every surface [${backend}]`, () => {
    let srv: TestServer;
    let db: TestDatabase | undefined;
    let since = "";
    let commits: string[] = [];

    beforeAll(async () => {
      if (backend === "postgres") db = await createTestDatabase();
      srv = await startTestServer({ EVENTS_HEARTBEAT_MS: "200", ...(db ? { DATABASE_URL: db.url } : {}) });
      await post(srv, "/resources/create", {
        resources: [{ identifier: "w-ds", payload_type: "datasource", name: "d" }],
      });
      // The read point after that first commit: a heartbeat's at.
      const c = createClient(EventServiceV2, transports.grpc!(srv.url));
      for await (const m of c.watch({})) {
        since = m.at;
        break;
      }
      await post(srv, "/resources/create", {
        resources: [
          { identifier: "w-st", payload_type: "study", parent_identifier: "w-ds", modality: "CT" },
          { identifier: "w-an", payload_type: "annotation", parent_identifier: "w-st", label: "x" },
        ],
      });
      await post(srv, "/resources/update", { updates: { "w-st": { modality: "MR" } } });
      await post(srv, "/resources/delete", { identifiers: ["w-st"] });
      commits = [];
    }, 60_000);
    afterAll(async () => {
      await srv?.close();
      await db?.drop();
    });

    // Commit order; within a commit, identifier order.
    const expected = [
      ["w-an", "annotation", "created", 1],
      ["w-st", "study", "created", 1],
      ["w-st", "study", "updated", 2],
      ["w-an", "annotation", "deleted", 2],
      ["w-st", "study", "deleted", 3],
    ];

    for (const [name, make] of Object.entries(transports)) {
      for (const [rev, service] of [
        ["v1", EventServiceV1],
        ["v2", EventServiceV2],
      ] as const) {
        it(`${name} ${rev}: whole commits in order, then heartbeats`, async () => {
          const client = createClient(service, make(srv.url));
          const ac = new AbortController();
          const got: WatchResponse[] = [];
          let heartbeats = 0;
          try {
            for await (const m of client.watch({ since, includeResources: true }, { signal: ac.signal })) {
              if (m.events.length === 0) {
                if (got.length > 0) heartbeats += 1;
                if (heartbeats >= 2) break;
                continue;
              }
              got.push(m);
            }
          } finally {
            ac.abort();
          }
          const events = got.flatMap((m) => m.events);
          expect(events.map((e) => [e.identifier, e.payloadType, e.kind, Number(e.version)])).toEqual(expected);
          // Every message ends at its last event's commit, and no commit is split.
          for (const m of got) expect(m.at).toBe(m.events.at(-1)?.at);
          const stamps = got.map((m) => new Set(m.events.map((e) => e.at)));
          for (let i = 0; i < stamps.length; i++)
            for (let j = i + 1; j < stamps.length; j++)
              for (const s of stamps[i]!) expect(stamps[j]!.has(s)).toBe(false);
          expect(events[2]?.resource?.payload).toMatchObject({ case: "study", value: { modality: "MR" } });
          commits.push(...events.map((e) => e.at));
        });
      }
    }

    it("REST over HTTP/1.1: text/event-stream, flat JSON, payload_type repeated, heartbeats", async () => {
      const q = new URLSearchParams({ since, include_resources: "true" });
      q.append("payload_type", "study");
      q.append("payload_type", "datasource");
      for (const prefix of ["", "/v1", "/v2"]) {
        const r = await sseOverHttp1(
          `${srv.url}${prefix}/events?${q.toString()}`,
          {},
          (f) => f.some((x) => x.data !== undefined) && f.at(-1)?.heartbeat === true,
        );
        expect(r.status).toBe(200);
        expect(r.type).toMatch(/^text\/event-stream/);
        const data = r.frames.filter((f) => f.data !== undefined);
        const events = data.flatMap((f) => (f.data as { events: Record<string, unknown>[] }).events);
        expect(events.map((e) => [e.identifier, e.kind, e.version])).toEqual([
          ["w-st", "created", 1],
          ["w-st", "updated", 2],
          ["w-st", "deleted", 3],
        ]);
        for (const f of data) expect(f.id).toBe((f.data as { at: string }).at);
        expect(events[1]).toMatchObject({
          payload_type: "study",
          resource: { identifier: "w-st", payload_type: "study", modality: "MR", version: 2 },
        });
        expect(events[0]).not.toHaveProperty("resource.children");
        expect(r.frames.at(-1)?.id).toMatch(/^\d{4}-\d\d-\d\dT.*\.\d{6}Z$/);
      }
    });

    it("REST honours Last-Event-ID, and serves HTTP/2 too", async () => {
      const all = await sseOverHttp1(
        `${srv.url}/events?since=${encodeURIComponent(since)}`,
        {},
        (f) => f.at(-1)?.heartbeat === true,
      );
      const firstId = all.frames.find((f) => f.data !== undefined)?.id ?? "";
      const after = await sseOverHttp1(
        `${srv.url}/events`,
        { "last-event-id": firstId },
        (f) => f.at(-1)?.heartbeat === true,
      );
      const before = all.frames.filter((f) => f.data !== undefined).slice(1);
      expect(after.frames.filter((f) => f.data !== undefined)).toEqual(before);
      const h2 = await sseOverHttp2(
        srv.url,
        `/events?since=${encodeURIComponent(since)}`,
        (f) => f.at(-1)?.heartbeat === true,
      );
      expect(h2.status).toBe(200);
      expect(h2.frames.filter((f) => f.data !== undefined)).toEqual(all.frames.filter((f) => f.data !== undefined));
    });

    it("an EventSource-style reconnect with since in the URL resumes from Last-Event-ID, not replays", async () => {
      // EventSource reconnects to the very URL it opened (since and all) with the last id it took.
      const url = `${srv.url}/events?since=${encodeURIComponent(since)}`;
      const all = await sseOverHttp1(url, {}, (f) => f.at(-1)?.heartbeat === true);
      const events = all.frames.flatMap(
        (f) => (f.data as { events: { at: string; identifier: string; version: number }[] } | undefined)?.events ?? [],
      );
      expect(events.length).toBe(5);
      // As if the last id taken were the update's commit.
      const lastId = events[2]!.at;
      const again = await sseOverHttp1(url, { "last-event-id": lastId }, (f) => f.at(-1)?.heartbeat === true);
      const resumed = again.frames.flatMap(
        (f) => (f.data as { events: { at: string; identifier: string; version: number }[] } | undefined)?.events ?? [],
      );
      expect(resumed).toEqual(events.filter((e) => e.at > lastId));
      expect(resumed.length).toBe(2);
    });

    it("a bad request is a JSON error before any stream", async () => {
      const bad = await sseOverHttp1(`${srv.url}/events?since=yesterday`, {}, () => true);
      expect(bad.status).toBe(400);
      expect(JSON.parse(bad.text ?? "")).toMatchObject({ code: "invalid_argument" });
      const badType = await sseOverHttp1(`${srv.url}/events?payload_type=nope`, {}, () => true);
      expect(badType.status).toBe(400);
      const badRoot = await sseOverHttp1(
        `${srv.url}/events?root_identifier=${encodeURIComponent("../x")}`,
        {},
        () => true,
      );
      expect(badRoot.status).toBe(400);
    });
  });
}

describe("REST events: split commits and the stream limit", () => {
  let srv: TestServer;
  let limited: TestServer;
  beforeAll(async () => {
    srv = await startTestServer({ EVENTS_HEARTBEAT_MS: "200", EVENTS_MAX_MESSAGE_BYTES: "2048" });
    limited = await startTestServer({ MAX_WATCH_STREAMS: "2" });
  }, 60_000);
  afterAll(async () => {
    await srv?.close();
    await limited?.close();
  });

  it("a split commit's partial frames carry partial and an id that resends the whole commit", async () => {
    await post(srv, "/resources/create", {
      resources: [{ identifier: "sp-ds", payload_type: "datasource", name: "d" }],
    });
    let since = "";
    for await (const m of createClient(EventServiceV2, transports.grpc!(srv.url)).watch({})) {
      since = m.at;
      break;
    }
    const ids = Array.from({ length: 40 }, (_, i) => `sp-${String(i).padStart(2, "0")}`);
    await post(srv, "/resources/create", {
      resources: ids.map((identifier) => ({
        identifier,
        payload_type: "study",
        parent_identifier: "sp-ds",
        modality: "CT",
        description: "d".repeat(100),
      })),
    });
    const url = `${srv.url}/events?include_resources=true&since=${encodeURIComponent(since)}`;
    type Data = { at: string; partial?: boolean; events: { identifier: string }[] };
    const whole = (f: { data?: unknown }) => f.data !== undefined && (f.data as Data).partial !== true;
    const r = await sseOverHttp1(url, {}, (f) => f.some(whole));
    expect(r.text).toBeUndefined();
    const data = r.frames.filter((f) => f.data !== undefined).map((f) => ({ id: f.id, data: f.data as Data }));
    const at = data.at(-1)!.data.at;
    expect(data.length).toBeGreaterThan(2);
    for (const f of data.slice(0, -1)) {
      expect(f.data.partial).toBe(true);
      expect(f.id).toBe(f.data.at);
      expect(f.id! < at).toBe(true);
    }
    expect(data.at(-1)?.id).toBe(at);
    expect(data.flatMap((f) => f.data.events.map((e) => e.identifier))).toEqual(ids);
    // A reconnect after a partial frame: the whole commit, from its first event.
    const again = await sseOverHttp1(url, { "last-event-id": data[1]!.id! }, (f) => f.some(whole));
    expect(
      again.frames.flatMap(
        (f) => (f.data as { events: { identifier: string }[] } | undefined)?.events.map((e) => e.identifier) ?? [],
      ),
    ).toEqual(ids);
  });

  it("one stream more than MAX_WATCH_STREAMS is 429 resource_exhausted", async () => {
    const open = [new AbortController(), new AbortController()];
    const responses = await Promise.all(open.map((ac) => fetch(`${limited.url}/events`, { signal: ac.signal })));
    try {
      for (const r of responses) expect(r.status).toBe(200);
      const third = await fetch(`${limited.url}/events`);
      expect(third.status).toBe(429);
      expect(await third.json()).toMatchObject({ code: "resource_exhausted" });
    } finally {
      for (const ac of open) ac.abort();
    }
  });
});
