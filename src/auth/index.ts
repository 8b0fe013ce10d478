// Authentication and scopes (README, "Authentication"; docs/api.md lists each operation's scope).
export { createAuthenticator } from "./authenticator.js";
export type { Authenticator, Principal } from "./authenticator.js";
export { assertSafeBind, isLoopback } from "./bind-check.js";
export { streamExpiry, type StreamExpiry } from "./expiry.js";
export { actorKey, callerKey, callerOf, checkScope, createAuthInterceptor, trustedCallerKey } from "./interceptor.js";
export { declaredScope, requiredScope } from "./method-scope.js";
export { createOidcVerifier, grantsOfClaim, parseDefaultGrants, scopesOf } from "./oidc.js";
export type { DefaultGrants, OidcOptions, OidcVerifier } from "./oidc.js";
export { SCOPES, grants, isScope, type Scope } from "./scopes.js";
export { createTokenSet, isReservedActor, parseTokenEntries } from "./tokens.js";
