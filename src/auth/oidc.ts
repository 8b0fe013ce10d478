// OIDC access tokens: JWTs signed by the issuer's keys (JWKS), checked for
// issuer, audience (when configured), expiry and not-before by jose. The
// JWKS location comes from OIDC_JWKS_URL or from the issuer's discovery
// document, fetched on first use and again after a failure, so the service
// starts even while the identity provider is down.
import { createRemoteJWKSet, errors, jwtVerify, type JWTPayload } from "jose";
import { unauthenticated, unavailable } from "../errors.js";
import { grantsOf, parseGrantScope, type GrantScope, type Grants } from "../access/index.js";
import { isScope, type Scope } from "./scopes.js";

export interface OidcOptions {
  readonly issuer: string;
  readonly audience?: string | undefined;
  readonly jwksUrl?: string | undefined;
  /** For discovery and JWKS requests (default 5 s). */
  readonly timeoutMs?: number;
}

export interface OidcIdentity {
  readonly subject: string;
  readonly scopes: ReadonlySet<Scope>;
  /** From the `datasource:` and `clearance:` strings of the same claim (docs/contract/18-access.md). */
  readonly grants: Grants;
}

export interface OidcVerifier {
  verify(jwt: string): Promise<OidcIdentity>;
}

function claimNames(payload: JWTPayload): string[] {
  const raw = payload.scope ?? payload.scp;
  return typeof raw === "string" ? raw.split(" ") : Array.isArray(raw) ? raw.filter((x): x is string => typeof x === "string") : [];
}

/** The scopes of the `scope` claim (space separated) or else `scp` (array or string); unknown ones are ignored. */
export function scopesOf(payload: JWTPayload): Set<Scope> {
  const out = new Set<Scope>();
  for (const n of claimNames(payload)) if (isScope(n)) out.add(n);
  return out;
}

/**
 * The grants of the same claim. A malformed grant string (`clearance:top`)
 * cannot widen anything: it is dropped, and a dropped clearance leaves the
 * caller at the lowest clearance rather than the default.
 */
export function grantsOfClaim(payload: JWTPayload): Grants {
  const found: GrantScope[] = [];
  let malformedClearance = false;
  let malformedDatasource = false;
  for (const n of claimNames(payload)) {
    const g = parseGrantScope(n);
    if (g === undefined) continue;
    if ("error" in g) {
      if (n.toLowerCase().startsWith("clearance:")) malformedClearance = true;
      if (n.toLowerCase().startsWith("datasource:")) malformedDatasource = true;
      continue;
    }
    if (g.kind !== "actor") found.push(g);
  }
  if (malformedClearance && !found.some((g) => g.kind === "clearance")) found.push({ kind: "clearance", level: "public" });
  const grants = grantsOf(found);
  // A dropped datasource scope must not leave "no datasource scope" (= every
  // datasource): the caller keeps only the well-formed ones it listed.
  if (malformedDatasource && grants.datasources === "all" && !found.some((g) => g.kind === "datasource" && g.id === "*")) {
    const ids = new Set(found.flatMap((g) => (g.kind === "datasource" ? [g.id] : [])));
    return Object.freeze({ datasources: ids, clearance: grants.clearance });
  }
  return grants;
}

async function discoverJwksUri(issuer: string, timeoutMs: number): Promise<URL> {
  const where = `${issuer.replace(/\/+$/, "")}/.well-known/openid-configuration`;
  const res = await fetch(where, { signal: AbortSignal.timeout(timeoutMs), redirect: "error" });
  if (!res.ok) throw new Error(`discovery answered ${res.status}`);
  const doc = (await res.json()) as { jwks_uri?: unknown };
  if (typeof doc.jwks_uri !== "string") throw new Error("discovery document has no jwks_uri");
  return new URL(doc.jwks_uri);
}

// Failures that say the token is bad, as opposed to the provider being unreachable.
const TOKEN_ERRORS = new Set([
  errors.JWTExpired.code,
  errors.JWTClaimValidationFailed.code,
  errors.JWTInvalid.code,
  errors.JWSInvalid.code,
  errors.JWSSignatureVerificationFailed.code,
  errors.JWKSNoMatchingKey.code,
  errors.JWKSMultipleMatchingKeys.code,
  errors.JOSEAlgNotAllowed.code,
  errors.JOSENotSupported.code,
  errors.JWKInvalid.code,
]);

export function createOidcVerifier(opts: OidcOptions): OidcVerifier {
  const timeoutMs = opts.timeoutMs ?? 5000;
  let jwks: Promise<ReturnType<typeof createRemoteJWKSet>> | undefined;
  const keys = () => {
    jwks ??= (async () => {
      const url = opts.jwksUrl !== undefined ? new URL(opts.jwksUrl) : await discoverJwksUri(opts.issuer, timeoutMs);
      return createRemoteJWKSet(url, { timeoutDuration: timeoutMs });
    })();
    return jwks;
  };
  return {
    async verify(jwt) {
      let payload: JWTPayload;
      try {
        const set = await keys().catch((err: unknown) => {
          jwks = undefined; // try discovery again on the next call
          throw err;
        });
        ({ payload } = await jwtVerify(jwt, set, {
          issuer: opts.issuer,
          ...(opts.audience !== undefined ? { audience: opts.audience } : {}),
          clockTolerance: 5,
        }));
      } catch (err) {
        if (err instanceof errors.JOSEError && TOKEN_ERRORS.has(err.code)) throw unauthenticated("the bearer token is not valid");
        throw unavailable("the identity provider's keys could not be fetched", "IDENTITY_PROVIDER_UNAVAILABLE");
      }
      return { subject: typeof payload.sub === "string" ? payload.sub : "", scopes: scopesOf(payload), grants: grantsOfClaim(payload) };
    },
  };
}
