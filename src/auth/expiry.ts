// Open streams end when their credential expires (docs/contract/12-authentication.md):
// a feed opened with a JWT is checked once, when it opens, so without this it
// would outlive its token. The handler of a long-lived stream watches with
// this signal and, once it has ended, calls check(), which answers
// unauthenticated when the token's expiry ended it.
import { unauthenticated } from "../errors.js";

/** The longest delay setTimeout keeps (about 24.8 days); a later expiry re-arms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export interface StreamExpiry {
  /** Aborted when `signal` is, or when the credential expires. */
  readonly signal: AbortSignal;
  /** Throws unauthenticated when the credential's expiry ended the stream. */
  check(): void;
  /** Clears the timer (call when the stream ends). */
  dispose(): void;
}

export function streamExpiry(
  signal: AbortSignal,
  expiresAt: number | undefined,
  now: () => number = Date.now,
): StreamExpiry {
  if (expiresAt === undefined) return { signal, check: () => undefined, dispose: () => undefined };
  const expiry = new AbortController();
  let expired = false;
  let timer: NodeJS.Timeout | undefined;
  const arm = (): void => {
    const left = expiresAt - now();
    if (left <= 0) {
      expired = true;
      expiry.abort();
      return;
    }
    timer = setTimeout(arm, Math.min(left, MAX_TIMER_MS));
    timer.unref();
  };
  arm();
  return {
    signal: AbortSignal.any([signal, expiry.signal]),
    check() {
      if (expired) throw unauthenticated("the bearer token expired; open the stream again with a fresh token");
    },
    dispose() {
      clearTimeout(timer);
    },
  };
}
