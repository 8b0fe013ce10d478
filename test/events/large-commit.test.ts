// A commit too large for one message of a default gRPC client (docs/events.md): a
// cascading delete of a 20,000-resource subtree (no batch limit applies to a
// cascade), watched with include_resources by @grpc/grpc-js with the 4 MiB
// receive limit that Go, Java and Python clients have by default. As one
// message (about 7 MB) such a client could never get past it; split by
// EVENTS_MAX_MESSAGE_BYTES it reads every event once. The same with Python
// grpcio (test/events/watch_grpcio.py, a channel of default options), and
// its control: a server that does not split makes it fail RESOURCE_EXHAUSTED.
import { execFile, spawnSync } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  WatchRequestSchema,
  WatchResponseSchema,
  type WatchResponse,
} from "../../gen/resourcestore/type/v1/event_pb.js";
import { createResourceStore } from "../../src/store/index.js";
import { startTestServer, type TestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable, type TestDatabase } from "../support/postgres.js";
import { LOCAL_CALLER } from "../../src/access/index.js";

const pgOk = await postgresReachable();
const execFileAsync = promisify(execFile);
const FOUR_MIB = 4 * 1024 * 1024;

/** Server-streams Watch through grpc-js until `until`; the first error fails. */
function watchGrpcJs(address: string, since: string, until: (m: WatchResponse) => boolean): Promise<WatchResponse[]> {
  const client = new grpc.Client(address, grpc.credentials.createInsecure(), {
    "grpc.max_receive_message_length": FOUR_MIB,
  });
  const request = create(WatchRequestSchema, { since, includeResources: true });
  const call = client.makeServerStreamRequest(
    "/resourcestore.v2.EventService/Watch",
    (r: typeof request) => Buffer.from(toBinary(WatchRequestSchema, r)),
    (b: Buffer) => fromBinary(WatchResponseSchema, b),
    request,
  );
  const out: WatchResponse[] = [];
  return new Promise<WatchResponse[]>((resolve, reject) => {
    call.on("data", (m: WatchResponse) => {
      out.push(m);
      if (until(m)) {
        call.cancel();
        client.close();
        resolve(out);
      }
    });
    call.on("error", (err: grpc.ServiceError) => {
      client.close();
      if (err.code === grpc.status.CANCELLED) resolve(out);
      else reject(err);
    });
  });
}

/** Debian's Python with python3-grpcio (a python3 first on PATH, pyenv's or a venv's, would not see it). */
const PYTHON = process.env.PYTHON_GRPCIO ?? "/usr/bin/python3";
const pythonGrpcio = spawnSync(PYTHON, ["-c", "import grpc"], { encoding: "utf8" }).status === 0;
/** CI installs python3-grpcio (.ci/run): there a missing one fails the test, it never skips. */
const requirePython = process.env.CI === "true" || process.env.REQUIRE_POSTGRES === "1";

interface PythonWatch {
  status: string;
  detail?: string;
  messages: number;
  partial: number;
  partialAtBeforeUntil: number;
  events: number;
  identifiers: number;
  deleted: number;
  withResource: number;
  atUntil: number;
  largestMessage: number;
}

/** Runs test/events/watch_grpcio.py: Python grpcio with a channel of default options. */
async function watchPython(address: string, since: string, until: string): Promise<PythonWatch> {
  if (!pythonGrpcio)
    throw new Error(
      `the Python grpcio test needs ${PYTHON} with grpc: install it with \`apt-get install python3-grpcio\` (Debian) or set PYTHON_GRPCIO`,
    );
  const script = join(import.meta.dirname, "watch_grpcio.py");
  const { stdout, stderr } = await execFileAsync(PYTHON, [script, address, since, until], {
    maxBuffer: 1 << 20,
    timeout: 120_000,
  });
  if (stderr.trim() !== "") console.log(stderr);
  return JSON.parse(stdout.trim().split("\n").pop() ?? "") as PythonWatch;
}

describe.skipIf(!pgOk)("a commit larger than a default gRPC client's receive limit", () => {
  let db: TestDatabase;
  let srv: TestServer;
  let since = "";
  let at = "";
  beforeAll(async () => {
    db = await createTestDatabase();
    srv = await startTestServer({
      DATABASE_URL: db.url,
      EVENTS_HEARTBEAT_MS: "1000",
      ...(process.env.CONTROL_NO_SPLIT === "1" ? { EVENTS_MAX_MESSAGE_BYTES: "1073741824" } : {}),
    });
    const store = createResourceStore(srv.app.db);
    const description = "d".repeat(300);
    await store.create(LOCAL_CALLER, [
      { identifier: "big-root", payloadType: "datasource", payload: { name: "root" } },
    ]);
    for (let done = 1; done < 20_000; done += 10_000) {
      const n = Math.min(10_000, 20_000 - done);
      since = (
        await store.create(
          LOCAL_CALLER,
          Array.from({ length: n }, (_, i) => ({
            identifier: `big-${String(done + i).padStart(5, "0")}`,
            payloadType: "datasource",
            parentIdentifier: "big-root",
            payload: { name: `n${done + i}`, description },
          })),
        )
      ).at;
    }
    const deleted = await store.delete(LOCAL_CALLER, ["big-root"], { cascade: true });
    expect(deleted.count).toBe(20_000);
    at = deleted.at;
  }, 180_000);
  afterAll(async () => {
    await srv?.close();
    await db?.drop();
  });

  it("a cascading delete of 20,000 resources watched with include_resources arrives, every event once, within 4 MiB messages", async () => {
    const address = new URL(srv.url).host;
    const messages = await watchGrpcJs(address, since, (m) => m.at >= at && !m.partial);
    const events = messages.flatMap((m) => m.events);
    expect(events.length).toBe(20_000);
    expect(new Set(events.map((e) => e.identifier)).size).toBe(20_000);
    expect(events.every((e) => e.at === at && e.kind === "deleted" && e.resource !== undefined)).toBe(true);
    const partial = messages.filter((m) => m.partial);
    expect(partial.length).toBeGreaterThanOrEqual(2);
    for (const m of partial) expect(m.at < at).toBe(true);
    for (const m of messages) expect(toBinary(WatchResponseSchema, m).length).toBeLessThanOrEqual(1_048_576);
    console.log(`20,000 events in ${messages.length} messages (${partial.length} partial)`);
  }, 180_000);

  it.skipIf(!pythonGrpcio && !requirePython)(
    "a cascading delete of 20,000 resources watched with include_resources by Python grpcio with its default limits arrives, every event once",
    async () => {
      const got = await watchPython(new URL(srv.url).host, since, at);
      console.log(`Python grpcio: ${JSON.stringify(got)}`);
      expect(got.status).toBe("OK");
      expect(got.events).toBe(20_000);
      expect(got.identifiers).toBe(20_000);
      expect(got.deleted).toBe(20_000);
      expect(got.withResource).toBe(20_000);
      expect(got.atUntil).toBe(20_000);
      // Split: several messages, every one but the last partial, each `at` before the commit's.
      expect(got.messages).toBeGreaterThanOrEqual(3);
      expect(got.partial).toBe(got.messages - 1);
      expect(got.partialAtBeforeUntil).toBe(got.partial);
      expect(got.largestMessage).toBeLessThanOrEqual(FOUR_MIB);
    },
    180_000,
  );

  it.skipIf(!pythonGrpcio && !requirePython)(
    "the same delete as one message (EVENTS_MAX_MESSAGE_BYTES of 1 GiB) is more than Python grpcio takes: RESOURCE_EXHAUSTED",
    async () => {
      // The control: the same client and the same history from a server that does not split.
      const unsplit = await startTestServer({
        DATABASE_URL: db.url,
        EVENTS_HEARTBEAT_MS: "1000",
        EVENTS_MAX_MESSAGE_BYTES: "1073741824",
      });
      try {
        const got = await watchPython(new URL(unsplit.url).host, since, at);
        console.log(`Python grpcio, unsplit: ${JSON.stringify(got)}`);
        expect(got.status).toBe("RESOURCE_EXHAUSTED");
        expect(got.events).toBe(0);
      } finally {
        await unsplit.close();
      }
    },
    180_000,
  );
});
