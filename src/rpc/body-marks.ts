// What the body guard (and the unary lane, which parses bodies itself)
// tells the call interceptor about a request body: that it did not parse
// (binary or JSON), or the message it parsed already. Carried in the call's
// context values.
import type { Message } from "@bufbuild/protobuf";
import { createContextKey, type Code } from "@connectrpc/connect";
import type { ReasonFor } from "../errors.js";

/**
 * Set on a call whose body did not decode, with why: a binary body that is
 * not a message of the method's input type (notAMessage), JSON that did not
 * parse (the unary lane, the body guard; connect's own message), or a
 * compressed body or message that did not decompress (the body guard). The call interceptor answers it invalid_argument with a
 * request id and a log line, where connect, decoding before any
 * interceptor, would answer without either (and a cut gzip stream with
 * internal).
 */
export const malformedBodyReason = createContextKey<BodyRefusal | undefined>(undefined, {
  description: "why the body did not decode",
});

/** Why a body did not decode: the message, and MALFORMED_BODY, or UNKNOWN_FIELD for a JSON key the message does not have. */
export interface BodyRefusal {
  readonly message: string;
  readonly reason: ReasonFor<Code.InvalidArgument>;
}

/** The refusal of a binary body that is not a message of `typeName`. */
export function notAMessage(typeName: string): BodyRefusal {
  return { message: `the request body is not a valid ${typeName} message`, reason: "MALFORMED_BODY" };
}

/** A unary call's request message (binary or JSON), already parsed by the guard; the router was given an empty one. */
export const parsedBody = createContextKey<Message | undefined>(undefined, { description: "parsed body" });
