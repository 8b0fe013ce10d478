// Credentials never reach a log line, whatever object a caller logs; the
// caller's objects are not changed on the way.
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger } from "../src/log.js";

function capture() {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split("\n")) if (l !== "") lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  return { log: createLogger("info", sink), lines };
}

describe("log lines", () => {
  it("censor authorization at the top, one level down and in req.headers", () => {
    const { log, lines } = capture();
    const headers = { authorization: "Bearer tok-headers", accept: "application/json" };
    const req = { method: "GET", headers: { authorization: "Bearer tok-req", host: "x" } };
    const err = Object.assign(new Error("boom"), { authorization: "Bearer tok-err" });
    log.info({ authorization: "Bearer tok-top", request_id: "r1" }, "top");
    log.info({ headers }, "headers");
    log.info({ req }, "req");
    log.info({ err }, "err");
    log.info({ upstream: { authorization: "Basic tok-any" } }, "any key");
    const text = JSON.stringify(lines);
    for (const secret of ["tok-top", "tok-headers", "tok-req", "tok-err", "tok-any"])
      expect(text).not.toContain(secret);
    expect(lines[0]).toMatchObject({ authorization: "[redacted]", request_id: "r1", msg: "top" });
    expect(lines[1]).toMatchObject({ headers: { authorization: "[redacted]", accept: "application/json" } });
    expect(lines[2]).toMatchObject({ req: { method: "GET", headers: { authorization: "[redacted]", host: "x" } } });
    // The error keeps its serialised shape (type, message, stack).
    expect(lines[3]).toMatchObject({ err: { type: "Error", message: "boom" } });
    expect((lines[3]!.err as { stack?: string }).stack).toContain("boom");
    expect(lines[4]).toMatchObject({ upstream: { authorization: "[redacted]" } });
    // The caller's objects are untouched.
    expect(headers.authorization).toBe("Bearer tok-headers");
    expect(req.headers.authorization).toBe("Bearer tok-req");
    expect(err.authorization).toBe("Bearer tok-err");
  });

  it("leave lines without credentials as they are", () => {
    const { log, lines } = capture();
    log.info({ request_id: "r2", rpc: "a/B", code: "ok", duration_ms: 1.5 }, "call");
    expect(lines[0]).toMatchObject({
      request_id: "r2",
      rpc: "a/B",
      code: "ok",
      duration_ms: 1.5,
      msg: "call",
      service: "resource-store",
    });
    expect(Object.keys(lines[0]!)).not.toContain("authorization");
  });
});

describe("a REST request's call record", () => {
  it("takes the call's outcome while open, and not once the request has closed (the call then writes its own line)", async () => {
    const { logCall } = await import("../src/rpc/index.js");
    const { log, lines } = capture();
    const open = { closed: false };
    logCall(log, open, "r1", "a.v1.S/M", "ok", 1.5);
    expect(open).toEqual({ closed: false, rpc: "a.v1.S/M", code: "ok" });
    expect(lines).toHaveLength(0);
    const closed = { closed: true };
    logCall(log, closed, "r2", "a.v1.S/M", "ok", 1.5);
    expect(closed).toEqual({ closed: true });
    logCall(log, undefined, "r3", "a.v1.S/M", "ok", 1.5);
    expect(lines.map((l) => l.request_id)).toEqual(["r2", "r3"]);
    expect(lines[0]).toMatchObject({ rpc: "a.v1.S/M", code: "ok", duration_ms: 1.5, msg: "call" });
  });
});
