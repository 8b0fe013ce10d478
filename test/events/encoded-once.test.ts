// The feed's messages to protobuf-binary clients are encoded once per
// message, not once per stream (rpc/event-service.ts, docs/events.md): the bytes
// ride in the response's unknown fields. They must be exactly the bytes
// toBinary makes of the message itself (events with and without resources,
// partial or not, a heartbeat), decode back to it, and be one object for
// every stream that sends the same message.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { WatchResponseSchema } from "../../gen/resourcestore/type/v1/event_pb.js";
import { preEncoded, toEventMessage } from "../../src/rpc/index.js";
import type { EventMessage, ResourceEvent } from "../../src/store/index.js";

const AT = "2026-11-26T18:00:00.123456Z";

function event(i: number, withResource: boolean): ResourceEvent {
  return {
    at: AT,
    identifier: `enc-${i}-é`,
    payloadType: "datasource",
    kind: i % 2 === 0 ? "created" : "deleted",
    version: i + 1,
    actor: i % 3 === 0 ? "unknown" : `user-${i}`,
    ...(withResource
      ? {
          resource: {
            identifier: `enc-${i}-é`,
            payloadType: "datasource",
            parentIdentifier: i === 0 ? null : "enc-0-é",
            license: "CC-BY-4.0",
            accessLevel: "internal",
            derivedFrom: i === 2 ? ["x", "y"] : [],
            payload: { name: `n${i}`, country: "NL", description: "d".repeat(i * 40) },
            createdAt: AT,
            updatedAt: AT,
            version: i + 1,
          },
        }
      : {}),
  };
}

/** What the service sent before: the message built field by field. */
function direct(m: EventMessage) {
  return create(WatchResponseSchema, { at: m.at, events: m.events.map(toEventMessage), partial: m.partial === true });
}

describe("a WatchResponse encoded once", () => {
  const cases: [string, EventMessage][] = [
    ["a heartbeat", { at: AT, events: [] }],
    ["whole commits without resources", { at: AT, events: [0, 1, 2].map((i) => event(i, false)) }],
    ["whole commits with resources", { at: AT, events: [0, 1, 2, 3].map((i) => event(i, true)) }],
    [
      "a partial message",
      { at: "2026-11-26T18:00:00.123455Z", events: [0, 1, 2, 3, 4].map((i) => event(i, true)), partial: true },
    ],
  ];
  it.each(cases)("%s: the same bytes as toBinary of the message itself, and decodes back to it", (_name, m) => {
    const bytes = toBinary(WatchResponseSchema, preEncoded(m));
    const want = toBinary(WatchResponseSchema, direct(m));
    expect(Buffer.from(bytes).equals(Buffer.from(want))).toBe(true);
    expect(fromBinary(WatchResponseSchema, bytes)).toEqual(fromBinary(WatchResponseSchema, want));
  });

  it("is made once per message: every stream sending it gets the same object", () => {
    const m: EventMessage = { at: AT, events: [0, 1].map((i) => event(i, true)) };
    expect(preEncoded(m)).toBe(preEncoded(m));
    expect(preEncoded({ ...m })).not.toBe(preEncoded(m));
  });
});
