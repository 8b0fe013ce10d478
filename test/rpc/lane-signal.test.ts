// The unary lane builds a call's abort signal only when the call asks for it
// (src/rpc/unary-lane.ts, invokeUnary; src/http/abort-on-close.ts,
// abortOnCloseLazily): an AbortController per call cost a loaded service
// about 2% of its CPU, and most unary handlers never read the signal. A
// handler or interceptor that does read it gets the signal of its request,
// aborted when the client goes away, also when it went away before the
// signal was asked for. And the lane still runs the interceptors as
// connect's invoker does: outermost first, their headers and trailers on
// the answer.
import { EventEmitter } from "node:events";
import type { ServerResponse } from "node:http";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { WhoAmIRequestSchema, WhoAmIResponseSchema } from "../../gen/resourcestore/type/v1/identity_pb.js";
import { IdentityService } from "../../gen/resourcestore/v2/identity_service_pb.js";
import { abortOnCloseLazily } from "../../src/http/abort-on-close.js";
import { createUnaryLane, type Pipeline } from "../../src/rpc/index.js";

function laneWith(interceptors: Interceptor[], whoAmI: (ctx: HandlerContext) => Promise<unknown>) {
  const pipeline = {
    interceptors,
    readMaxBytes: 1 << 20,
    acceptCompression: [],
    feedCompression: [],
    jsonOptions: {},
  } as unknown as Pipeline;
  const impl = { whoAmI: (_req: unknown, ctx: HandlerContext) => whoAmI(ctx) };
  return createUnaryLane({
    services: [IdentityService],
    impls: new Map([[IdentityService.typeName, impl]]),
    pipeline,
  });
}

function callOf(signal: () => AbortSignal) {
  return {
    method: IdentityService.method.whoAmI,
    message: create(WhoAmIRequestSchema, {}),
    header: new Headers(),
    signal,
    protocolName: "test",
    requestMethod: "POST",
    url: "http://test.invalid/whoami",
  };
}

describe("the unary lane's signal", () => {
  it("is never made for a call that does not read it", async () => {
    let made = 0;
    const lane = laneWith([], () => Promise.resolve(create(WhoAmIResponseSchema, { actor: "a" })));
    const out = await lane.call(
      callOf(() => {
        made += 1;
        return new AbortController().signal;
      }),
    );
    expect(out.message).toMatchObject({ actor: "a" });
    expect(made).toBe(0);
  });

  it("is made once for a handler and an interceptor that both read it, and is the request's", async () => {
    let made = 0;
    const controller = new AbortController();
    const seen: AbortSignal[] = [];
    const reads: Interceptor = (next) => (req) => {
      seen.push(req.signal);
      return next(req);
    };
    const lane = laneWith([reads], (ctx) => {
      seen.push(ctx.signal, ctx.signal);
      return Promise.resolve({ actor: "plain init, made a message" });
    });
    const out = await lane.call(
      callOf(() => {
        made += 1;
        return controller.signal;
      }),
    );
    expect(made).toBe(1);
    expect(seen).toEqual([controller.signal, controller.signal, controller.signal]);
    // A handler's plain init object is made a message of the output type, as connect's invoker does.
    expect(out.message.$typeName).toBe(WhoAmIResponseSchema.typeName);
  });

  it("runs the interceptors outermost first, their headers and trailers on the answer, their failures thrown", async () => {
    const order: string[] = [];
    const stamp =
      (name: string): Interceptor =>
      (next) =>
      async (req) => {
        order.push(`in ${name}`);
        const res = await next(req);
        order.push(`out ${name}`);
        res.header.set(`x-${name}`, "1");
        res.trailer.set(`x-t-${name}`, "1");
        return res;
      };
    const lane = laneWith([stamp("a"), stamp("b")], (ctx) => {
      ctx.responseHeader.set("x-handler", "1");
      return Promise.resolve(create(WhoAmIResponseSchema, {}));
    });
    const out = await lane.call(callOf(() => new AbortController().signal));
    expect(order).toEqual(["in a", "in b", "out b", "out a"]);
    expect([...out.header.keys()].sort()).toEqual(["x-a", "x-b", "x-handler"]);
    expect([...out.trailer.keys()].sort()).toEqual(["x-t-a", "x-t-b"]);
    const refusing: Interceptor = () => () => Promise.reject(new ConnectError("no", Code.PermissionDenied));
    await expect(
      laneWith([refusing], () => Promise.resolve({})).call(callOf(() => new AbortController().signal)),
    ).rejects.toMatchObject({ code: Code.PermissionDenied });
  });
});

/** A response as abortOnCloseLazily sees one: it emits `close`, and says whether it was ended first. */
function fakeResponse(): ServerResponse & { end(): void } {
  const res = new EventEmitter() as EventEmitter & { writableEnded: boolean; end(): void };
  res.writableEnded = false;
  res.end = () => {
    res.writableEnded = true;
  };
  return res as unknown as ServerResponse & { end(): void };
}

describe("abortOnCloseLazily", () => {
  it("aborts a signal asked for before the client went away, with the reason", () => {
    const res = fakeResponse();
    const signal = abortOnCloseLazily(res, () => "gone")();
    expect(signal.aborted).toBe(false);
    res.emit("close");
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBe("gone");
  });

  it("gives a signal already aborted when the client went away before it was asked for", () => {
    const res = fakeResponse();
    const lazily = abortOnCloseLazily(res, () => "gone");
    res.emit("close");
    const signal = lazily();
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBe("gone");
    expect(lazily()).toBe(signal);
  });

  it("does not abort when the answer was ended before the close", () => {
    const res = fakeResponse();
    const lazily = abortOnCloseLazily(res);
    const before = lazily();
    res.end();
    res.emit("close");
    expect(before.aborted).toBe(false);
    expect(lazily().aborted).toBe(false);
  });
});
