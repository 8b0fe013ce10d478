// Static bearer tokens from API_TOKENS / API_TOKENS_FILE, in the form
// `token=scope,scope;token2=scope` (a file may hold one entry a line, `#`
// starts a comment). Lookups compare SHA-256 digests with timingSafeEqual
// against every entry, so the time taken says nothing about how close a
// guess was, nor which entry matched.
import { createHash, timingSafeEqual } from "node:crypto";
import { ConfigError } from "../config.js";
import { grantsOf, parseGrantScope, type GrantScope, type Grants } from "../access/index.js";
import { isScope, type Scope } from "./scopes.js";

export interface TokenEntry {
  /** Position in the configuration, the only way a token is ever named (logs, errors). */
  readonly name: string;
  readonly digest: Buffer;
  readonly scopes: ReadonlySet<Scope>;
  /** From its `datasource:` and `clearance:` scopes (docs/contract/18-access.md). */
  readonly grants: Grants;
  /** Its `actor:` scope, when it has one (docs/contract/19-audit-history.md). */
  readonly actor?: string;
}

export interface TokenSet {
  readonly size: number;
  /** The entry whose token equals `presented`, or undefined. */
  find(presented: string): TokenEntry | undefined;
}

/** What a JWT's actor starts with (`oidc:<sub>`, docs/contract/19-audit-history.md). */
export const OIDC_ACTOR_PREFIX = "oidc:";

/**
 * Whether an `actor:` name is one the service gives itself: `local`
 * (authentication off), `unknown` (versions written before actors were
 * recorded), `token#N` (a static token without `actor:`) and `oidc:...`
 * (a JWT). Compared without case, so that no name reads like one of them.
 */
function isReservedActor(name: string): boolean {
  const n = name.toLowerCase();
  return n === "local" || n === "unknown" || /^token#/.test(n) || n.startsWith(OIDC_ACTOR_PREFIX);
}

function digest(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}

/**
 * Parses entries; `source` names the variable in errors. Errors never quote a
 * token, only its position.
 */
export function parseTokenEntries(text: string, source: string): TokenEntry[] {
  const out: TokenEntry[] = [];
  const lines = text.split(/\r?\n/);
  // Comments are for the file; in the one-line variable a "#" at the start of
  // an entry is refused, since it reads as a commented-out token.
  const comments = source !== "API_TOKENS";
  lines.forEach((rawLine, lineNo) => {
    const line = (comments ? rawLine.replace(/(^|\s)#.*$/, "") : rawLine).trim();
    if (line === "") return;
    line.split(";").forEach((rawEntry, entryNo) => {
      const entry = rawEntry.trim();
      if (entry === "") return;
      const where = lines.length > 1 ? `line ${lineNo + 1}, entry ${entryNo + 1}` : `entry ${entryNo + 1}`;
      if (!comments && entry.startsWith("#"))
        throw new ConfigError(source, `${where}: starts with "#" (API_TOKENS has no comments; API_TOKENS_FILE has)`);
      // Scopes never hold "=", tokens may (base64 padding): split at the last one.
      const eq = entry.lastIndexOf("=");
      if (eq <= 0) throw new ConfigError(source, `${where}: expected token=scope[,scope]`);
      const token = entry.slice(0, eq).trim();
      if (/\s/.test(token)) throw new ConfigError(source, `${where}: a token must not contain spaces`);
      // Case is kept for the values of grant scopes (datasource ids are case-sensitive).
      const names = entry
        .slice(eq + 1)
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s !== "");
      if (names.length === 0) throw new ConfigError(source, `${where}: a token needs at least one scope`);
      const scopes = new Set<Scope>();
      const grantScopes: GrantScope[] = [];
      let actor: string | undefined;
      for (const n of names) {
        const grant = parseGrantScope(n);
        if (grant !== undefined && "error" in grant) throw new ConfigError(source, `${where}: ${grant.error}`);
        if (grant !== undefined) {
          if (grant.kind === "actor") {
            if (actor !== undefined) throw new ConfigError(source, `${where}: a token has at most one actor scope`);
            if (isReservedActor(grant.name)) {
              throw new ConfigError(
                source,
                `${where}: actor name ${JSON.stringify(grant.name)} is reserved (local, unknown, token#N and oidc:... name the service's own actors)`,
              );
            }
            actor = grant.name;
          } else grantScopes.push(grant);
          continue;
        }
        const lower = n.toLowerCase();
        if (!isScope(lower)) {
          throw new ConfigError(
            source,
            `${where}: unknown scope ${JSON.stringify(n)} (read, write, admin, datasource:<id>, clearance:<level>, actor:<name>)`,
          );
        }
        scopes.add(lower);
      }
      if (scopes.size === 0) throw new ConfigError(source, `${where}: a token needs read, write or admin`);
      out.push({
        name: `${source}#${out.length + 1}`,
        digest: digest(token),
        scopes,
        grants: grantsOf(grantScopes),
        ...(actor !== undefined ? { actor } : {}),
      });
    });
  });
  return out;
}

export function createTokenSet(entries: readonly TokenEntry[]): TokenSet {
  const seen = new Set<string>();
  for (const e of entries) {
    const key = e.digest.toString("hex");
    if (seen.has(key)) throw new ConfigError(e.name.split("#")[0] ?? "API_TOKENS", "holds the same token twice");
    seen.add(key);
  }
  return {
    size: entries.length,
    find(presented) {
      const d = digest(presented);
      let found: TokenEntry | undefined;
      // No early exit: every entry is compared every time.
      for (const e of entries) {
        if (timingSafeEqual(d, e.digest) && found === undefined) found = e;
      }
      return found;
    },
  };
}
