// EventService handlers (both revisions): the change feed as a server stream.
// The feed is pulled: connect writes a message, waits until the transport
// takes it, and only then asks the generator for the next one, so a slow
// client holds a few pages of history, never more.
//
// A commit shared by many streams is one set of ResourceEvent objects in the
// feed; its protobuf Events are made once too (cached by event object), so a
// thousand streams with include_resources hold one copy of a commit, not a
// thousand.
//
// Encoded once, too (docs/events.md): to a client that speaks protobuf binary
// (gRPC, gRPC-Web, Connect with +proto, and the REST layer's in-process
// transport) each message goes out as bytes made once per message (the
// feed hands the same message to every stream that sees the same events)
// from bytes made once per event. The bytes ride in the response's unknown
// fields, which protobuf-es writes verbatim after the (empty) known ones:
// the wire carries exactly the WatchResponse's own encoding. Profiled with
// 100 streams, encoding every message for every stream was 60% of the
// server's time. A JSON client (Connect +json) gets the message itself.
import { create } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  EventSchema,
  WatchResponseSchema,
  type Event,
  type WatchResponse,
} from "../../gen/resourcestore/type/v1/event_pb.js";
import type { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";
import { callerOf, streamExpiry } from "../auth/index.js";
import { plannedToBinary } from "../protobuf/index.js";
import type { EventFeed, EventMessage, ResourceEvent } from "../store/index.js";
import { parseAsOf } from "./as-of.js";
import { toResourceMessage } from "./resource-service.js";
import { invalidArgument } from "../errors.js";

export interface EventServiceDeps {
  readonly feed: EventFeed;
  /** config.events.heartbeatMs */
  readonly heartbeatMs: number;
}

function parseSince(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  try {
    return parseAsOf(value);
  } catch {
    throw invalidArgument(`since ${JSON.stringify(value)} is not an RFC 3339 timestamp with Z or an offset`);
  }
}

const messages = new WeakMap<ResourceEvent, Event>();

export function toEventMessage(e: ResourceEvent): Event {
  let m = messages.get(e);
  if (m === undefined) {
    m = create(EventSchema, {
      at: e.at,
      identifier: e.identifier,
      payloadType: e.payloadType,
      kind: e.kind,
      version: BigInt(e.version),
      actor: e.actor,
      ...(e.resource ? { resource: toResourceMessage(e.resource) } : {}),
    });
    messages.set(e, m);
  }
  return m;
}

const eventBytes = new WeakMap<ResourceEvent, Uint8Array>();

/**
 * The protobuf binary encoding of one event, made once however many streams
 * send it, by the planned encoder (the same bytes as toBinary, in about half
 * its time: after sharing the gzip, this was the feed's largest cost per
 * commit at 100 streams).
 */
function encodedEvent(e: ResourceEvent): Uint8Array {
  let b = eventBytes.get(e);
  if (b === undefined) {
    b = plannedToBinary(EventSchema, toEventMessage(e));
    eventBytes.set(e, b);
  }
  return b;
}

const bodies = new WeakMap<EventMessage, WatchResponse>();

/**
 * A WatchResponse whose encoding is `message`'s, made once per message: one
 * unknown field 1 (`at`, a string) whose data is the length and bytes of
 * `at` followed by the rest of the encoding (the events, field 2, and
 * `partial`, field 3), so that writing its tag and data, as toBinary does,
 * writes the whole message as the known fields would have.
 */
export function preEncoded(message: EventMessage): WatchResponse {
  let r = bodies.get(message);
  if (r === undefined) {
    const w = new BinaryWriter().string(message.at);
    for (const e of message.events) w.tag(2, WireType.LengthDelimited).bytes(encodedEvent(e));
    if (message.partial === true) w.tag(3, WireType.Varint).bool(true);
    r = create(WatchResponseSchema);
    r.$unknown = [{ no: 1, wireType: WireType.LengthDelimited, data: w.finish() }];
    bodies.set(message, r);
  }
  return r;
}

/** Whether the call's messages go out as protobuf binary (not JSON): gRPC, gRPC-Web, Connect +proto. */
function speaksBinary(contentType: string | null): boolean {
  return contentType !== null && /^application\/(grpc(-web)?(\+proto)?|connect\+proto)\s*(;|$)/i.test(contentType);
}

export function createEventService(deps: EventServiceDeps): ServiceImpl<typeof EventService> {
  return {
    async *watch(req, ctx) {
      // The caller first: its grants go into the statements that read the history.
      const { grants, expiresAt } = callerOf(ctx);
      // The stream ends when the caller's token expires (auth/expiry.ts).
      const expiry = streamExpiry(ctx.signal, expiresAt);
      try {
        const stream = deps.feed.watch({
          since: parseSince(req.since),
          payloadTypes: req.payloadTypes,
          ...(req.rootIdentifier !== undefined ? { rootIdentifier: req.rootIdentifier } : {}),
          includeResources: req.includeResources === true,
          heartbeatMs: deps.heartbeatMs,
          signal: expiry.signal,
          grants,
        });
        if (speaksBinary(ctx.requestHeader.get("content-type"))) {
          for await (const message of stream) yield preEncoded(message);
        } else {
          for await (const message of stream) {
            yield create(WatchResponseSchema, {
              at: message.at,
              events: message.events.map(toEventMessage),
              partial: message.partial === true,
            });
          }
        }
      } finally {
        expiry.dispose();
      }
      expiry.check();
    },
  };
}
