// OIDC access tokens: JWTs signed by the issuer's keys (JWKS), checked for
// issuer, audience (when configured), expiry, not-before and issued-at. The
// JWKS location comes from OIDC_JWKS_URL or from the issuer's discovery
// document, fetched on first use, so the service starts even while the
// identity provider is down.
//
// Keys (docs/contract/12-authentication.md): the last good JWKS is kept and
// used through a provider outage for up to OIDC_JWKS_MAX_STALE_MS after it
// was due for a refresh; every fetch (discovery and JWKS alike) goes through
// one global rate limit (at most one fetch at a time, one start per
// `minIntervalMs`) with exponential backoff after failures. A token naming an
// unknown key waits for the next allowed fetch (under a second when the
// provider is healthy), so a rotated key is accepted within seconds while a
// flood of unknown `kid`s costs the provider one request per interval.
//
// Grants (docs/contract/18-access.md): read from the claim the operator names
// (OIDC_GRANTS_CLAIM; unset: `scope` and `scp`). A JWT is written by the
// client's request, not by the operator, so an axis the token carries no
// grant for is the narrowest (no datasource, clearance `public`) unless
// OIDC_DEFAULT_GRANTS says otherwise, and a string that looks like a grant
// but does not parse switches the defaults off: it narrows, never widens.
import { createLocalJWKSet, decodeProtectedHeader, errors, jwtVerify, type JSONWebKeySet, type JWTPayload } from "jose";
import { ConnectError } from "@connectrpc/connect";
import { ConfigError } from "../config.js";
import { unauthenticated, unavailable } from "../errors.js";
import {
  ACCESS_LEVELS,
  ALL_GRANTS,
  accessRank,
  parseGrantScope,
  type AccessLevel,
  type Grants,
} from "../access/index.js";
import { isScope, type Scope } from "./scopes.js";

export interface OidcOptions {
  readonly issuer: string;
  readonly audience?: string | undefined;
  readonly jwksUrl?: string | undefined;
  /** OIDC_GRANTS_CLAIM: the claim the grant strings come from; unset = `scope` and `scp`. */
  readonly grantsClaim?: string | undefined;
  /** OIDC_DEFAULT_GRANTS, parsed (parseDefaultGrants). */
  readonly defaultGrants?: DefaultGrants | undefined;
  /** OIDC_ALLOW_NO_EXP: accept a token without `exp` (it then never expires). */
  readonly allowNoExp?: boolean | undefined;
  /** For discovery and JWKS requests (default 5 s). */
  readonly timeoutMs?: number;
  /** No two key fetches start closer than this (default 1 s). */
  readonly minIntervalMs?: number;
  /** Keys are refetched (in the background) once this old (default 10 min). */
  readonly maxAgeMs?: number;
  /** OIDC_JWKS_MAX_STALE_MS: how long past maxAgeMs the last good keys still serve while refetching fails (default 24 h). */
  readonly maxStaleMs?: number;
  /** The longest pause between fetches after failures (default 60 s). */
  readonly maxBackoffMs?: number;
  /** The clock (tests). */
  readonly now?: () => number;
  /** Told of each failed fetch of discovery or the JWKS (for the log; the message holds no token). */
  readonly onFetchFailure?: (message: string) => void;
}

interface OidcIdentity {
  readonly subject: string;
  readonly scopes: ReadonlySet<Scope>;
  /** From the grant strings of the grants claim (docs/contract/18-access.md). */
  readonly grants: Grants;
  /** When the token stops being accepted (ms since the epoch), undefined when it has no `exp`. */
  readonly expiresAt?: number;
}

export interface OidcVerifier {
  verify(jwt: string): Promise<OidcIdentity>;
}

/** The seconds of clock skew allowed on `exp`, `nbf` and `iat`. */
const CLOCK_TOLERANCE_S = 5;

/** Signature algorithms accepted: asymmetric ones only (a JWKS holds public keys). */
const ALGORITHMS = [
  "RS256",
  "RS384",
  "RS512",
  "PS256",
  "PS384",
  "PS512",
  "ES256",
  "ES384",
  "ES512",
  "EdDSA",
  "Ed25519",
];

/** What a claim holds as strings: a space separated string, or an array (a non-string element is kept as null). */
function claimStrings(payload: JWTPayload, name: string): (string | null)[] {
  const raw = payload[name];
  if (typeof raw === "string") return raw.split(" ").filter((s) => s !== "");
  if (Array.isArray(raw)) return raw.map((x) => (typeof x === "string" ? x : null));
  return raw === undefined || raw === null ? [] : [null];
}

/** The claims grant strings are read from. */
function grantClaims(grantsClaim: string | undefined): string[] {
  return grantsClaim === undefined ? ["scope", "scp"] : [grantsClaim];
}

/**
 * The operation scopes (read, write, admin) of `scope` and `scp` (each a
 * space separated string or an array), and of the grants claim when it is
 * another one; unknown ones are ignored.
 */
function scopesOf(payload: JWTPayload, grantsClaim?: string): Set<Scope> {
  const out = new Set<Scope>();
  const names = new Set(["scope", "scp", ...grantClaims(grantsClaim)]);
  for (const claim of names) for (const n of claimStrings(payload, claim)) if (n !== null && isScope(n)) out.add(n);
  return out;
}

/** Grants an operator gives a JWT axis that carries none (OIDC_DEFAULT_GRANTS). */
export interface DefaultGrants {
  readonly datasources?: "all" | ReadonlySet<string>;
  readonly clearance?: AccessLevel;
}

/** OIDC_DEFAULT_GRANTS: `datasource:` and `clearance:` strings separated by spaces or commas; anything else stops start-up. */
export function parseDefaultGrants(text: string): DefaultGrants {
  let all = false;
  const ids = new Set<string>();
  let clearance: AccessLevel | undefined;
  for (const s of text.split(/[\s,]+/).filter((x) => x !== "")) {
    const g = parseGrantScope(s);
    if (g === undefined || "error" in g || g.kind === "actor") {
      throw new ConfigError(
        "OIDC_DEFAULT_GRANTS",
        `${JSON.stringify(s)} is not a grant (datasource:<id>, datasource:*, clearance:<level>)`,
      );
    }
    if (g.kind === "datasource") {
      if (g.id === "*") all = true;
      else ids.add(g.id);
    } else if (clearance === undefined || accessRank(g.level) > accessRank(clearance)) clearance = g.level;
  }
  return {
    ...(all ? { datasources: "all" as const } : ids.size > 0 ? { datasources: ids } : {}),
    ...(clearance !== undefined ? { clearance } : {}),
  };
}

/** Whether a string that is not a well-formed grant still looks like one (or like a botched one): it then narrows. */
function looksLikeGrant(s: string): boolean {
  return s.includes(":") || /datasource|clearance/i.test(s.normalize("NFKC"));
}

/**
 * The grants of a JWT (docs/contract/18-access.md): the well-formed
 * `datasource:` and `clearance:` strings of the grants claim. An axis with
 * none takes the operator's default for it, else the narrowest (no
 * datasource, clearance `public`). A string of the claim that looks like a
 * grant but does not parse (a comma, a space, a tab, a homoglyph, an unknown
 * level), or an element that is not a string, switches the defaults off for
 * every axis: what it meant cannot be known, so the token keeps only what
 * it spelled correctly.
 */
export function grantsOfClaim(
  payload: JWTPayload,
  opts: { readonly grantsClaim?: string | undefined; readonly defaults?: DefaultGrants | undefined } = {},
): Grants {
  let all = false;
  const ids = new Set<string>();
  let clearance: AccessLevel | undefined;
  let malformed = false;
  for (const claim of grantClaims(opts.grantsClaim)) {
    for (const s of claimStrings(payload, claim)) {
      if (s === null) {
        malformed = true;
        continue;
      }
      const g = parseGrantScope(s);
      if (g === undefined) {
        if (!isScope(s) && looksLikeGrant(s)) malformed = true;
        continue;
      }
      if ("error" in g) {
        malformed = true;
        continue;
      }
      if (g.kind === "datasource") {
        if (g.id === "*") all = true;
        else ids.add(g.id);
      } else if (g.kind === "clearance") {
        if (clearance === undefined || accessRank(g.level) > accessRank(clearance)) clearance = g.level;
      }
      // actor: names static tokens only; a JWT's actor is its subject.
    }
  }
  const defaults = malformed ? {} : (opts.defaults ?? {});
  const datasources: "all" | ReadonlySet<string> = all
    ? "all"
    : ids.size > 0
      ? ids
      : (defaults.datasources ?? new Set<string>());
  const level: AccessLevel = clearance ?? defaults.clearance ?? (ACCESS_LEVELS[0] as AccessLevel);
  return datasources === "all" && level === "restricted"
    ? ALL_GRANTS
    : Object.freeze({ datasources, clearance: level });
}

async function discoverJwksUri(issuer: string, timeoutMs: number): Promise<URL> {
  const where = `${issuer.replace(/\/+$/, "")}/.well-known/openid-configuration`;
  const res = await fetch(where, { signal: AbortSignal.timeout(timeoutMs), redirect: "error" });
  if (!res.ok) throw new Error(`discovery answered ${res.status}`);
  const doc = (await res.json()) as { jwks_uri?: unknown };
  if (typeof doc.jwks_uri !== "string") throw new Error("discovery document has no jwks_uri");
  return new URL(doc.jwks_uri);
}

async function fetchJwks(url: URL, timeoutMs: number): Promise<ReturnType<typeof createLocalJWKSet>> {
  const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), redirect: "error" });
  if (!res.ok) throw new Error(`JWKS answered ${res.status}`);
  // createLocalJWKSet refuses a document that is not a JWKS.
  return createLocalJWKSet((await res.json()) as JSONWebKeySet);
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

/** A fetch the rate limit or the backoff does not allow now. */
class NotNow extends Error {}

interface Keys {
  readonly set: ReturnType<typeof createLocalJWKSet>;
  readonly fetchedAt: number;
}

/**
 * The keys: the last good JWKS and one fetch at a time through the rate
 * limit. `fresh(seen)` is a fetch that starts after `seen` fetches had
 * started: the one running if it did, else the next one, started when the
 * rate limit allows (joined by every caller until it starts). After a
 * failure nobody waits: a fetch the backoff does not allow yet is refused.
 */
function createKeyCache(opts: OidcOptions) {
  const timeoutMs = opts.timeoutMs ?? 5000;
  const minIntervalMs = opts.minIntervalMs ?? 1000;
  const maxAgeMs = opts.maxAgeMs ?? 600_000;
  const maxStaleMs = opts.maxStaleMs ?? 24 * 3_600_000;
  const maxBackoffMs = opts.maxBackoffMs ?? 60_000;
  const now = opts.now ?? Date.now;
  let keys: Keys | undefined;
  let jwksUri: URL | undefined = opts.jwksUrl !== undefined ? new URL(opts.jwksUrl) : undefined;
  let started = 0;
  let lastStart = Number.NEGATIVE_INFINITY;
  let failures = 0;
  let inflight: { readonly id: number; readonly promise: Promise<void> } | undefined;
  let scheduled: Promise<void> | undefined;

  const nextSlot = () =>
    lastStart + (failures === 0 ? minIntervalMs : Math.min(minIntervalMs * 2 ** failures, maxBackoffMs));

  function fetchNow(): Promise<void> {
    const id = ++started;
    lastStart = now();
    const promise = (async () => {
      try {
        jwksUri ??= await discoverJwksUri(opts.issuer, timeoutMs);
        const uri = jwksUri;
        try {
          keys = { set: await fetchJwks(uri, timeoutMs), fetchedAt: now() };
        } catch (err) {
          // A discovered location that fails is discovered again next time.
          if (opts.jwksUrl === undefined) jwksUri = undefined;
          throw err;
        }
        failures = 0;
      } catch (err) {
        failures += 1;
        opts.onFetchFailure?.(err instanceof Error ? err.message : String(err));
        throw err;
      } finally {
        inflight = undefined;
      }
    })();
    inflight = { id, promise };
    return promise;
  }

  function fresh(seen: number): Promise<void> {
    if (inflight !== undefined && inflight.id > seen) return inflight.promise;
    if (scheduled !== undefined) return scheduled;
    if (failures > 0 && nextSlot() > now()) return Promise.reject(new NotNow());
    if (inflight === undefined && nextSlot() <= now()) return fetchNow();
    const running = inflight?.promise;
    const next = (async () => {
      try {
        if (running !== undefined) await running.catch(() => undefined);
        const wait = nextSlot() - now();
        if (failures > 0 && wait > 0) throw new NotNow();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait).unref());
      } finally {
        scheduled = undefined;
      }
      return fetchNow();
    })();
    scheduled = next;
    return next;
  }

  return {
    /** How many fetches have started (a caller's `seen`). */
    get started() {
      return started;
    },
    /** The keys if they may still be used, refreshing them in the background when due. */
    usable(): Keys | undefined {
      if (keys === undefined) return undefined;
      const age = now() - keys.fetchedAt;
      if (age > maxAgeMs) void fresh(started).catch(() => undefined);
      return age <= maxAgeMs + maxStaleMs ? keys : undefined;
    },
    /** Any fetch at all: the running one, else a new one (through the rate limit). */
    any(): Promise<void> {
      return inflight !== undefined ? inflight.promise : fresh(started);
    },
    fresh,
  };
}

export function createOidcVerifier(opts: OidcOptions): OidcVerifier {
  const cache = createKeyCache(opts);
  const now = opts.now ?? Date.now;
  const providerDown = () =>
    unavailable("the identity provider's keys could not be fetched", "IDENTITY_PROVIDER_UNAVAILABLE");
  const invalid = () => unauthenticated("the bearer token is not valid");

  async function check(jwt: string, keys: Keys): Promise<JWTPayload> {
    const { payload } = await jwtVerify(jwt, keys.set, {
      issuer: opts.issuer,
      ...(opts.audience !== undefined ? { audience: opts.audience } : {}),
      algorithms: ALGORITHMS,
      clockTolerance: CLOCK_TOLERANCE_S,
      currentDate: new Date(now()),
      ...(opts.allowNoExp === true ? {} : { requiredClaims: ["exp"] }),
    });
    return payload;
  }

  return {
    async verify(jwt) {
      // The header first: a token that names no usable algorithm costs the provider nothing.
      let alg: unknown;
      try {
        alg = decodeProtectedHeader(jwt).alg;
      } catch {
        throw invalid();
      }
      if (typeof alg !== "string" || !ALGORITHMS.includes(alg)) throw invalid();
      const seen = cache.started;
      let payload: JWTPayload;
      try {
        let keys = cache.usable();
        if (keys === undefined) {
          await cache.any();
          keys = cache.usable();
          if (keys === undefined) throw providerDown();
        }
        try {
          payload = await check(jwt, keys);
        } catch (err) {
          if (!(err instanceof errors.JWKSNoMatchingKey)) throw err;
          // A key it has not seen: perhaps a rotated one. One fetch that started after this call arrived decides.
          await cache.fresh(seen);
          const again = cache.usable();
          if (again === undefined) throw providerDown();
          payload = await check(jwt, again);
        }
      } catch (err) {
        if (err instanceof errors.JOSEError && TOKEN_ERRORS.has(err.code)) throw invalid();
        if (err instanceof ConnectError) throw err;
        throw providerDown();
      }
      // jose checks `iat` only for being a number: one in the future is refused here.
      if (typeof payload.iat === "number" && payload.iat > now() / 1000 + CLOCK_TOLERANCE_S) throw invalid();
      const subject = typeof payload.sub === "string" ? payload.sub : "";
      if (subject === "") throw unauthenticated("the bearer token names no subject (sub)");
      return {
        subject,
        scopes: scopesOf(payload, opts.grantsClaim),
        grants: grantsOfClaim(payload, { grantsClaim: opts.grantsClaim, defaults: opts.defaultGrants }),
        ...(typeof payload.exp === "number" ? { expiresAt: (payload.exp + CLOCK_TOLERANCE_S) * 1000 } : {}),
      };
    },
  };
}
