// The in-process transport (src/rpc/lane-transport.ts) hands a caller of the
// process what a caller on the wire gets: the messages, the header, and the
// trailer a server stream ends with, set by the handler and by the
// interceptors once the messages have ended. Before the trailer was passed
// on, a stream answered through it ended with an empty one.
import { create } from "@bufbuild/protobuf";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { WatchResponseSchema, type WatchRequest } from "../../gen/resourcestore/type/v1/event_pb.js";
import { EventService } from "../../gen/resourcestore/v1/event_service_pb.js";
import { createLaneTransport, createUnaryLane, type Pipeline } from "../../src/rpc/index.js";

/** An interceptor that stamps the trailer once a stream's messages have ended, counting them. */
const countsOnEnd: Interceptor = (next) => async (req) => {
  const res = await next(req);
  if (!res.stream) return res;
  const trailer = res.trailer;
  return {
    ...res,
    message: (async function* () {
      let n = 0;
      for await (const m of res.message) {
        n++;
        yield m;
      }
      trailer.set("x-messages", String(n));
    })(),
  };
};

function transport() {
  const pipeline = {
    interceptors: [countsOnEnd],
    readMaxBytes: 1 << 20,
    acceptCompression: [],
    feedCompression: [],
    jsonOptions: {},
  } as unknown as Pipeline;
  const impl = {
    async *watch(_req: WatchRequest, ctx: { responseHeader: Headers; responseTrailer: Headers }) {
      ctx.responseHeader.set("x-started", "yes");
      yield create(WatchResponseSchema, {});
      // The second message after a turn of the event loop, as a handler reading the store gives it.
      await new Promise((resolve) => setImmediate(resolve));
      yield create(WatchResponseSchema, {});
      ctx.responseTrailer.set("x-ended", "by the handler");
    },
  };
  const lane = createUnaryLane({ services: [EventService], impls: new Map([[EventService.typeName, impl]]), pipeline });
  return createLaneTransport(lane);
}

describe("the lane transport's server streams", () => {
  it("end with the trailer the handler and the interceptors set, and begin with the header", async () => {
    const client = createClient(EventService, transport());
    let header: Headers | undefined;
    let trailer: Headers | undefined;
    let messages = 0;
    for await (const _ of client.watch({}, { onHeader: (h) => (header = h), onTrailer: (t) => (trailer = t) }))
      messages++;
    expect(messages).toBe(2);
    expect(header?.get("x-started")).toBe("yes");
    expect(trailer?.get("x-ended")).toBe("by the handler");
    expect(trailer?.get("x-messages")).toBe("2");
  });
});
