// The address of the client a call came from, for the read audit
// (docs/contract/19-audit-history.md). Set into each call's context by the
// paths that hold the client's socket (the Connect adapter and its lanes,
// the REST gateway's unary calls). REST streams reach their handlers through
// an in-process transport that carries headers only: the gateway sets
// PEER_HEADER on that call's headers itself, replacing whatever a client
// sent, and the audit reads the header only when the context holds no
// address, which on every path that a client reaches directly it does.
import type { AnyRequest } from "./read-body.js";
import { createContextKey } from "@connectrpc/connect";

/** The client's address as the socket says (no proxy header is trusted). */
export const peerKey = createContextKey<string | undefined>(undefined, { description: "the client's address" });

/** The header a REST stream's in-process call carries the address in. */
export const PEER_HEADER = "x-resourcestore-peer";

/** The socket's remote address, or "unknown" once the socket is gone. */
export function peerOf(req: AnyRequest): string {
  return req.socket?.remoteAddress ?? "unknown";
}
