// Who is calling: a static bearer token or an OIDC JWT, resolved to scopes.
// With neither configured, authentication is off (and the listener must stay
// on loopback, see bind-check.ts).
import { readFileSync } from "node:fs";
import type { AuthConfig } from "../config.js";
import { ConfigError } from "../config.js";
import { unauthenticated } from "../errors.js";
import { createOidcVerifier, parseDefaultGrants, type OidcVerifier } from "./oidc.js";
import type { Grants } from "../access/index.js";
import type { Scope } from "./scopes.js";
import { createTokenSet, OIDC_ACTOR_PREFIX, parseTokenEntries, type TokenEntry } from "./tokens.js";

export interface Principal {
  /** "API_TOKENS#2" for a static token (never the token), "oidc:<sub>" for a JWT. */
  readonly id: string;
  readonly scopes: ReadonlySet<Scope>;
  readonly grants: Grants;
  /**
   * The name written into the history (docs/contract/19-audit-history.md):
   * `oidc:<sub>` for a JWT, a static token's `actor:` scope, else `token#N`
   * (its position among all configured tokens).
   */
  readonly actor: string;
  /** When the credential stops being accepted (ms since the epoch): a JWT's `exp`; undefined = never. */
  readonly expiresAt?: number;
}

export interface Authenticator {
  readonly enabled: boolean;
  /** Resolves the Authorization header; rejects with unauthenticated (or unavailable when the IdP is down). */
  authenticate(authorization: string | null): Promise<Principal>;
}

const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

function readTokensFile(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    throw new ConfigError("API_TOKENS_FILE", `cannot be read (${typeof code === "string" ? code : "error"})`);
  }
}

export interface AuthenticatorDeps {
  readonly oidc?: OidcVerifier;
  /** Told when a fetch of the identity provider's keys fails (a message without secrets), for the log. */
  readonly onKeyFetchFailure?: (message: string) => void;
}

export function createAuthenticator(config: AuthConfig, deps: AuthenticatorDeps = {}): Authenticator {
  const entries: TokenEntry[] = [];
  if (config.tokens !== undefined) entries.push(...parseTokenEntries(config.tokens, "API_TOKENS"));
  if (config.tokensFile !== undefined)
    entries.push(...parseTokenEntries(readTokensFile(config.tokensFile), "API_TOKENS_FILE"));
  // A variable that is set but holds no token (only comments or separators) must not turn authentication off.
  if (config.tokens !== undefined && !entries.some((e) => e.name.startsWith("API_TOKENS#"))) {
    throw new ConfigError(
      "API_TOKENS",
      "holds no token (only comments or separators); unset it to run without static tokens",
    );
  }
  if (config.tokensFile !== undefined && !entries.some((e) => e.name.startsWith("API_TOKENS_FILE#"))) {
    throw new ConfigError(
      "API_TOKENS_FILE",
      "holds no token (only comments or blank lines); unset it to run without static tokens",
    );
  }
  const tokens = createTokenSet(entries);
  const actors = new Map(entries.map((e, i) => [e, e.actor ?? `token#${i + 1}`] as const));
  const oidc =
    deps.oidc ??
    (config.oidcIssuer !== undefined
      ? createOidcVerifier({
          issuer: config.oidcIssuer,
          audience: config.oidcAudience,
          jwksUrl: config.oidcJwksUrl,
          grantsClaim: config.oidcGrantsClaim,
          defaultGrants:
            config.oidcDefaultGrants === undefined ? undefined : parseDefaultGrants(config.oidcDefaultGrants),
          allowNoExp: config.oidcAllowNoExp,
          maxStaleMs: config.oidcJwksMaxStaleMs,
          ...(deps.onKeyFetchFailure !== undefined ? { onFetchFailure: deps.onKeyFetchFailure } : {}),
        })
      : undefined);
  const enabled = tokens.size > 0 || oidc !== undefined;

  return {
    enabled,
    async authenticate(authorization) {
      if (authorization === null)
        throw unauthenticated("this operation needs a bearer token (Authorization: Bearer <token>)");
      const m = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(authorization);
      if (m === null) throw unauthenticated("the Authorization header must be Bearer <token>");
      const presented = m[1] as string;
      const entry = tokens.find(presented);
      if (entry !== undefined)
        return { id: entry.name, scopes: entry.scopes, grants: entry.grants, actor: actors.get(entry) ?? entry.name };
      if (oidc !== undefined && JWT_SHAPE.test(presented)) {
        const who = await oidc.verify(presented);
        // One issuer is configured, so `oidc:` and the subject name the actor; static names never start so (tokens.ts).
        const actor = `${OIDC_ACTOR_PREFIX}${who.subject}`;
        return {
          id: actor,
          scopes: who.scopes,
          grants: who.grants,
          actor,
          ...(who.expiresAt !== undefined ? { expiresAt: who.expiresAt } : {}),
        };
      }
      throw unauthenticated("the bearer token is not valid");
    },
  };
}
