// With authentication off, anyone who can reach the port owns the data, so
// the server may then only listen on loopback.
import { isIP } from "node:net";
import { ConfigError } from "../config.js";

export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "localhost") return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  if (isIP(h) === 6) return h === "::1" || /^::ffff:127\./.test(h);
  return false;
}

/** Throws a ConfigError naming HOST when an unauthenticated server would listen beyond loopback. */
export function assertSafeBind(host: string, authEnabled: boolean): void {
  if (authEnabled || isLoopback(host)) return;
  throw new ConfigError(
    "HOST",
    `is ${JSON.stringify(host)}, but authentication is off: without API_TOKENS, API_TOKENS_FILE or OIDC_ISSUER the server listens on loopback only (HOST=127.0.0.1 or ::1)`,
  );
}
