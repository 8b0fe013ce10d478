// What is known of a request the moment it arrives: made once, by the front
// door (front-door.ts), and handed as a value to whichever path answers it
// (the Connect adapter and its lanes, the REST gateway, the ops routes).
// The request id is chosen here and nowhere else; the credentials the door
// checks are kept here, so the auth interceptor does not check them again;
// and the call's context values (the client's address, the door's
// principal, the arrival itself) are made here once, so every path hands
// its call the same ones, in process transports included.
// The door also resolves, once, what the request reaches (its resolution:
// the operation, and whatever the surface that serves it keeps of the
// match, a REST route and its bindings), and no later step looks it up again.
// Nothing of it is written into the request's headers or kept beside the
// request in a map.
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { DescMethod } from "@bufbuild/protobuf";
import { createContextKey, createContextValues, type ContextValues } from "@connectrpc/connect";
import { authenticatedKey, type Principal } from "../auth/index.js";
import { peerKey, peerOf } from "./peer.js";

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

export const REQUEST_ID = "x-request-id";
const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The client's request id when it is safe to log and echo, else a fresh one. */
export function requestIdOf(incoming: string | null | undefined): string {
  return incoming !== null && incoming !== undefined && SAFE_ID.test(incoming) ? incoming : randomUUID();
}

/**
 * A REST (or other non-RPC) request's one log line (http-fallback.ts): the
 * call of the request puts its outcome here instead of writing a line of its
 * own, and the request's line carries both (rpc and code beside method,
 * path and status). A record the request has already closed (its client
 * went away before the handler finished) is not filled: the call writes its
 * own line.
 */
export interface CallRecord {
  rpc?: string;
  code?: string;
  /** The call span's trace id, when tracing is on. */
  traceId?: string;
  closed: boolean;
}

/**
 * What a request reaches, resolved once by the front door: the operation
 * (undefined for a path no operation has) and whether the path is an RPC
 * path (/package.Service/Method) rather than a REST route. A surface keeps
 * its own match in a resolution of its own kind (the REST gateway's carries
 * the route and its bindings) and uses it instead of matching again.
 */
export interface Resolution {
  readonly method: DescMethod | undefined;
  readonly rpcPath: boolean;
}

export interface Arrival {
  /** The client's x-request-id when safe to echo, else a fresh one: the id of every line, answer and audit record of the request. */
  readonly requestId: string;
  /** process.hrtime.bigint() when the request arrived. */
  readonly started: bigint;
  /**
   * The call's context values, made here: the arrival, the client's address
   * and, once the door has checked the credentials, its principal. Every
   * path passes these to the call (the lanes, connect's router, in-process
   * transports).
   */
  readonly values: ContextValues;
  /** Set by the fallback for a request whose one log line it writes (a call's outcome goes into it). */
  record: CallRecord | undefined;
  /** Set by the front door (front-door.ts): what the request reaches; undefined until then, or when its path cannot be decoded. */
  resolution: Resolution | undefined;
}

/** The arrival of a call, in its context values (unset for a call the process makes itself). */
export const arrivalKey = createContextKey<Arrival | undefined>(undefined, {
  description: "what the front door learned of the call's request",
});

export function arrive(req: Req): Arrival {
  const header = req.headers[REQUEST_ID];
  const values = createContextValues().set(peerKey, peerOf(req));
  const arrival: Arrival = {
    requestId: requestIdOf(typeof header === "string" ? header : undefined),
    started: process.hrtime.bigint(),
    values,
    record: undefined,
    resolution: undefined,
  };
  values.set(arrivalKey, arrival);
  return arrival;
}

/** Keeps the principal the door authenticated `authorization` as, for the auth interceptor (which then checks the scope only). */
export function authenticatedAtDoor(arrival: Arrival, authorization: string | null, principal: Principal): void {
  arrival.values.set(authenticatedKey, { authorization, principal });
}

/** A request the door passes on: with what it learned of it. */
export type ArrivedHandler = (req: Req, res: Res, arrival: Arrival) => void;
