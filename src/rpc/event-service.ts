// EventService handlers (both revisions): the change feed as a server stream.
// The feed is pulled: connect writes a message, waits until the transport
// takes it, and only then asks the generator for the next one, so a slow
// client holds a few pages of history, never more.
//
// A commit shared by many streams is one set of ResourceEvent objects in the
// feed; its protobuf Events are made once too (cached by event object), so a
// thousand streams with include_resources hold one copy of a commit, not a
// thousand.
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { EventSchema, WatchResponseSchema, type Event } from "../../gen/resourcestore/type/v1/event_pb.js";
import type { EventService } from "../../gen/resourcestore/v2/event_service_pb.js";
import { callerOf } from "../auth/index.js";
import type { EventFeed, ResourceEvent } from "../store/index.js";
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

function toEventMessage(e: ResourceEvent): Event {
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

export function createEventService(deps: EventServiceDeps): ServiceImpl<typeof EventService> {
  return {
    async *watch(req, ctx) {
      const stream = deps.feed.watch({
        since: parseSince(req.since),
        payloadTypes: req.payloadTypes,
        ...(req.rootIdentifier !== undefined ? { rootIdentifier: req.rootIdentifier } : {}),
        includeResources: req.includeResources === true,
        heartbeatMs: deps.heartbeatMs,
        signal: ctx.signal,
        grants: callerOf(ctx).grants,
      });
      for await (const message of stream) {
        yield create(WatchResponseSchema, { at: message.at, events: message.events.map(toEventMessage), partial: message.partial === true });
      }
    },
  };
}
