// The REST gateway calls a unary method through the in-process router
// transport (so every interceptor runs) but hands its request message over in
// process and takes the response message back the same way: neither is
// encoded to protobuf and parsed again on the way (a create of 1,000
// resources spent a fifth of its server time in the second parse).
//
// A call finds its hand-over by an unguessable key in a request header the
// gateway sets and never forwards from a client. (This used an
// AsyncLocalStorage before: on Node 20 its promise hooks, once switched on,
// slow every promise of the process, measured 2.5x on a loop of awaits.)
import { randomUUID } from "node:crypto";
import type { DescMethod, Message } from "@bufbuild/protobuf";

export const HAND_OVER_HEADER = "x-rs-hand-over";

export interface HandOver {
  readonly method: DescMethod;
  /** The request message the call runs with (the router parsed an empty one). */
  readonly message: Message;
  /** Set by the call interceptor when it put `message` in place. */
  taken: boolean;
  /** The handler's response message, which the router carried as an empty one. */
  response?: Message;
}

const open = new Map<string, HandOver>();

/** Registers a hand-over under a fresh key until `close()`; send the key in HAND_OVER_HEADER. */
export function openHandOver(method: DescMethod, message: Message): { readonly key: string; readonly handOver: HandOver; close(): void } {
  const key = randomUUID();
  const handOver: HandOver = { method, message, taken: false };
  open.set(key, handOver);
  return { key, handOver, close: () => open.delete(key) };
}

/** The hand-over a unary call of `method` was sent with, once; undefined for any other call. */
export function takeHandOver(header: Headers, method: DescMethod): HandOver | undefined {
  const key = header.get(HAND_OVER_HEADER);
  if (key === null) return undefined;
  const handOver = open.get(key);
  if (handOver === undefined || handOver.taken || handOver.method !== method) return undefined;
  handOver.taken = true;
  return handOver;
}
