// Authentication and scopes (README, "Authentication"; docs/api.md lists each operation's scope).
export { createAuthenticator } from "./authenticator.js";
export type { Authenticator, Principal } from "./authenticator.js";
export { assertSafeBind, isLoopback } from "./bind-check.js";
export { streamExpiry } from "./expiry.js";
export {
  actorKey,
  authenticatedKey,
  type Authenticated,
  callerKey,
  callerOf,
  checkScope,
  createAuthInterceptor,
  credentialsKey,
  trustedCallerKey,
} from "./interceptor.js";
export { declaredScope } from "./method-scope.js";
export { createOidcVerifier, grantsOfClaim, parseDefaultGrants } from "./oidc.js";
export type { OidcOptions } from "./oidc.js";
export { grants, type Scope } from "./scopes.js";
export { parseTokenEntries } from "./tokens.js";
