// A long parquet export cancelled by a recovery conflict (docs/contract/16-limits.md;
// docs/scaling.md says which standby settings avoid one). The conflict is
// injected at the query layer: the end of the export's COPY (or, on the row
// path, its seventh FETCH), once the first row group went out, fails as PostgreSQL fails a standby query whose
// snapshot replay has to take away (SQLSTATE 40001, "canceling statement due
// to conflict with recovery"). Provoking a real one proved unreliable here:
// a standby backend blocked sending a FETCH result acts on the cancel only
// when the send completes. The export must fail cleanly: over REST the
// response is aborted, so the client never holds a file that parses; over
// Connect the stream ends with `unavailable`.
import { randomBytes } from "node:crypto";
import http from "node:http";
import pg from "pg";
import { parquetMetadata } from "hyparquet";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/app.js";
import { createTestDatabase, postgresReachable, REQUIRE_POSTGRES, type TestDatabase } from "../support/postgres.js";
import { TEST_REGISTRY_SECRET } from "../support/registry-key.js";

const havePg = await postgresReachable();
/** More than one row group (50,000 rows), so that bytes are out before the failing FETCH (of 10,000 rows each). */
const ROWS = 70_000;
const FAILING_FETCH = 7;

/**
 * Makes the `FAILING_FETCH`th FETCH of the export fail with a recovery
 * conflict, once, after `bodyStarted` (the client's first bytes): on a busy
 * machine the fetches can run ahead of the encoder, and a failure before the
 * first byte is the easy case (a plain error answer).
 */
function injectConflict(bodyStarted: Promise<void>): { restore: () => void; fired: () => boolean } {
  const proto = pg.Client.prototype as unknown as { query: (...a: unknown[]) => unknown };
  const original = proto.query;
  let fetches = 0;
  let fired = false;
  proto.query = function (this: pg.Client, ...args: unknown[]) {
    // The COPY the export reads on PostgreSQL: its end is replaced by the conflict, once the body started.
    const q = args[0] as
      { handleCopyData?: unknown; handleReadyForQuery?: () => void; handleError?: (e: unknown) => void } | undefined;
    if (typeof q === "object" && q !== null && typeof q.handleCopyData === "function" && !fired) {
      fired = true;
      const err = Object.assign(new Error("canceling statement due to conflict with recovery"), {
        code: "40001",
        severity: "ERROR",
      });
      q.handleReadyForQuery = () => void bodyStarted.then(() => q.handleError?.(err));
      return original.apply(this, args);
    }
    const text = typeof args[0] === "string" ? args[0] : "";
    if (text.startsWith("FETCH ") && ++fetches === FAILING_FETCH) {
      fired = true;
      const err = Object.assign(new Error("canceling statement due to conflict with recovery"), {
        code: "40001",
        severity: "ERROR",
        detail: "User query might have needed to see row versions that must be removed.",
      });
      return bodyStarted.then(() => Promise.reject(err));
    }
    return original.apply(this, args);
  };
  return { restore: () => (proto.query = original), fired: () => fired };
}

function parses(file: Buffer): boolean {
  try {
    parquetMetadata(file.buffer.slice(file.byteOffset, file.byteOffset + file.byteLength) as ArrayBuffer);
    return true;
  } catch {
    return false;
  }
}

/** The whole answer, and whether it was cut off instead of ending. */
function post(
  port: number,
  path: string,
  type: string,
  body: string | Buffer,
  onFirstData: () => void = () => undefined,
): Promise<{ status: number; body: Buffer; aborted: boolean }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: "127.0.0.1", port, method: "POST", path, headers: { "content-type": type } },
      (res) => {
        const chunks: Buffer[] = [];
        let settled = false;
        const finish = (aborted: boolean) => {
          if (settled) return;
          settled = true;
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks), aborted });
        };
        res.on("data", (d: Buffer) => {
          if (chunks.length === 0) onFirstData();
          chunks.push(d);
        });
        res.once("end", () => finish(false));
        res.once("aborted", () => finish(true));
        res.once("error", () => finish(true));
        res.once("close", () => finish(!res.complete));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

describe.skipIf(!havePg && !REQUIRE_POSTGRES)("an export cancelled by a recovery conflict", () => {
  let pgdb: TestDatabase;
  let srv: TestServer;
  let injected: ReturnType<typeof injectConflict> | undefined;

  beforeAll(async () => {
    pgdb = await createTestDatabase();
    srv = await startTestServer({ DATABASE_URL: pgdb.url, REGISTRY_SECRET: TEST_REGISTRY_SECRET });
    for (let k = 0; k < ROWS; k += 10_000) {
      const resources = Array.from({ length: 10_000 }, (_, i) => ({
        identifier: `row-${k + i}`,
        payload_type: "annotation",
        label: randomBytes(16).toString("hex"),
      }));
      const res = await fetch(`${srv.url}/resources/create`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ resources }),
      });
      expect(res.status).toBe(200);
    }
  }, 300_000);
  afterEach(() => {
    injected?.restore();
    injected = undefined;
  });
  afterAll(async () => {
    await srv?.close();
    await pgdb?.drop();
  });

  const query = JSON.stringify({ payload_type: "annotation" });

  it("without a conflict the same export is whole and parses (the control)", async () => {
    const out = await post(srv.port, "/query/parquet", "application/json", query);
    expect([out.status, out.aborted, parses(out.body)]).toEqual([200, false, true]);
  }, 120_000);

  it("REST: the response is aborted after its first bytes, and what arrived does not parse", async () => {
    let started = (): void => undefined;
    injected = injectConflict(new Promise((resolve) => (started = resolve)));
    const out = await post(srv.port, "/query/parquet", "application/json", query, () => started());
    expect(injected.fired()).toBe(true);
    expect(out.status).toBe(200);
    expect(out.body.length).toBeGreaterThan(0);
    expect(out.aborted).toBe(true);
    expect(parses(out.body)).toBe(false);
  }, 120_000);

  it("Connect: the stream ends with unavailable", async () => {
    let started = (): void => undefined;
    injected = injectConflict(new Promise((resolve) => (started = resolve)));
    const payload = Buffer.from(query);
    const envelope = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), payload]);
    envelope.writeUInt32BE(payload.length, 1);
    const out = await post(
      srv.port,
      "/resourcestore.v2.QueryService/QueryParquet",
      "application/connect+json",
      envelope,
      () => started(),
    );
    expect(injected.fired()).toBe(true);
    // Data envelopes went out first; the last one ends the stream (flag 0b10) with the error.
    const text = out.body.toString("latin1");
    const end = text.lastIndexOf('{"error"');
    expect(end).toBeGreaterThan(1000);
    expect(out.body[end - 5]).toBe(0b10);
    expect(JSON.parse(text.slice(end)) as unknown).toMatchObject({
      error: { code: "unavailable", message: expect.stringContaining("recovery") },
    });
  }, 120_000);
});
