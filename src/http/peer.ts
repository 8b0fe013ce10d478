// The address of the client a call came from, for the read audit
// (docs/contract/19-audit-history.md). Put into each call's context values
// by its arrival (arrival.ts), which every path hands its call, in-process
// calls of the REST gateway included; no header carries it.
import type { AnyRequest } from "./read-body.js";
import { createContextKey } from "@connectrpc/connect";

/** The client's address as the socket says (no proxy header is trusted). */
export const peerKey = createContextKey<string | undefined>(undefined, { description: "the client's address" });

/** The socket's remote address, or "unknown" once the socket is gone. */
export function peerOf(req: AnyRequest): string {
  return req.socket?.remoteAddress ?? "unknown";
}
