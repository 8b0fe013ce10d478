// Interceptors that observe a call's outcome (metrics, the call log) must
// wait for a streaming response's last message, not for the handler to
// return: one wrapper does that for all of them.
import type { StreamResponse, UnaryResponse } from "@connectrpc/connect";

/**
 * Calls `ended()` when the response is complete: at once for a unary answer,
 * after the last message of a stream. A stream that fails mid-way goes
 * through `failed(err)`, and what it returns is thrown to the client.
 */
export function onResponseEnd<R extends UnaryResponse | StreamResponse>(
  res: R,
  ended: () => void,
  failed: (err: unknown) => unknown,
): R {
  if (!res.stream) {
    ended();
    return res;
  }
  const source = res.message;
  return {
    ...res,
    message: (async function* () {
      try {
        yield* source;
        ended();
      } catch (err) {
        throw failed(err);
      }
    })(),
  };
}
