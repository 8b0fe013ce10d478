// Authentication and scopes (README, "Authentication"; docs/operations.md lists each operation's scope).
export { createAuthenticator } from "./authenticator.js";
export type { Authenticator, Principal } from "./authenticator.js";
export { assertSafeBind, isLoopback } from "./bind-check.js";
export { callerKey, callerOf, checkScope, createAuthInterceptor, trustedCallerKey } from "./interceptor.js";
export { declaredScope, requiredScope } from "./method-scope.js";
export { createOidcVerifier, grantsOfClaim, scopesOf } from "./oidc.js";
export type { OidcOptions, OidcVerifier } from "./oidc.js";
export { SCOPES, grants, isScope, type Scope } from "./scopes.js";
export { createTokenSet, parseTokenEntries } from "./tokens.js";
