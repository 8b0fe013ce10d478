// A small OIDC provider on localhost for tests: a discovery document, a JWKS
// whose signing key can be rotated, a `/token` endpoint that issues what a
// client asks for (as Keycloak client scopes and Auth0 permissions do: the
// requested scopes a user is allowed, plus a `grants` claim filled from the
// user's own assignments), a signer for tokens with any claims, and switches
// that take discovery or the JWKS down. It counts the requests it serves.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK, type JWTPayload } from "jose";

export interface ProviderUser {
  /** The scope strings the user may be issued when a client asks for them. */
  readonly allowed: readonly string[];
  /** What the provider puts in the `grants` claim whatever the client asks (the user's assignments). */
  readonly assigned?: readonly string[];
}

export interface SignOptions {
  expiresIn?: string | number;
  /** No `exp` claim at all. */
  noExp?: boolean;
  /** `iat` in seconds since the epoch (default: now). */
  iat?: number;
  issuer?: string;
  audience?: string;
  /** Signed by a key the JWKS never holds (with the current key's kid). */
  foreignKey?: boolean;
  /** The `kid` header (default: the current key's). */
  kid?: string;
}

export interface TestProvider {
  readonly issuer: string;
  readonly jwksUrl: string;
  /** Requests served, by path. */
  readonly hits: Map<string, number>;
  /** The kid the provider signs with now. */
  readonly kid: string;
  sign(claims: JWTPayload, opts?: SignOptions): Promise<string>;
  /** A new signing key, published in the JWKS beside the old one; returns its kid. */
  rotate(): Promise<string>;
  /** Answers 503 on discovery and/or the JWKS while set. */
  down(parts: { discovery?: boolean; keys?: boolean }): void;
  /** A user the `/token` endpoint knows (password grant). */
  addUser(name: string, user: ProviderUser): void;
  /** Asks `/token` for a token, as a client would: the scopes it asks for, for `audience`. */
  login(name: string, scope: string, audience: string): Promise<string>;
  close(): Promise<void>;
}

interface Key {
  readonly kid: string;
  readonly privateKey: CryptoKey;
  readonly jwk: JWK;
}

async function newKey(kid: string): Promise<Key> {
  const { publicKey, privateKey } = await generateKeyPair("ES256");
  return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: "ES256", use: "sig" } };
}

export async function startProvider(): Promise<TestProvider> {
  const keys: Key[] = [await newKey("test-key")];
  const other = await generateKeyPair("ES256");
  const users = new Map<string, ProviderUser>();
  const hits = new Map<string, number>();
  const isDown = { discovery: false, keys: false };
  let base = "";
  const current = () => keys[keys.length - 1] as Key;

  async function sign(claims: JWTPayload, opts: SignOptions = {}): Promise<string> {
    let jwt = new SignJWT(claims)
      .setProtectedHeader({ alg: "ES256", kid: opts.kid ?? current().kid })
      .setIssuedAt(opts.iat)
      .setIssuer(opts.issuer ?? base)
      .setSubject(typeof claims.sub === "string" ? claims.sub : "user-1");
    if (opts.noExp !== true) jwt = jwt.setExpirationTime(opts.expiresIn ?? "5m");
    if (opts.audience !== undefined) jwt = jwt.setAudience(opts.audience);
    return jwt.sign(opts.foreignKey === true ? other.privateKey : current().privateKey);
  }

  const server = http.createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    hits.set(path, (hits.get(path) ?? 0) + 1);
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (path === "/.well-known/openid-configuration") {
      if (isDown.discovery) return send(503, { error: "down" });
      return send(200, { issuer: base, jwks_uri: `${base}/keys`, token_endpoint: `${base}/token` });
    }
    if (path === "/keys") {
      if (isDown.keys) return send(503, { error: "down" });
      return send(200, { keys: keys.map((k) => k.jwk) });
    }
    if (path === "/token" && req.method === "POST") {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => {
        const form = new URLSearchParams(body);
        const user = users.get(form.get("username") ?? "");
        if (form.get("grant_type") !== "password" || user === undefined) return send(400, { error: "invalid_grant" });
        // The requested scopes the user is allowed, in the order asked: a client that asks for less gets less.
        const asked = (form.get("scope") ?? "").split(" ").filter((s) => s !== "");
        const scope = asked.filter((s) => user.allowed.includes(s)).join(" ");
        const claims: JWTPayload = {
          sub: form.get("username") ?? "",
          scope,
          ...(user.assigned !== undefined ? { grants: [...user.assigned] } : {}),
        };
        void sign(claims, { audience: form.get("audience") ?? undefined }).then((access_token) =>
          send(200, { access_token, token_type: "Bearer", expires_in: 300, scope }),
        );
      });
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    issuer: base,
    jwksUrl: `${base}/keys`,
    hits,
    get kid() {
      return current().kid;
    },
    sign,
    async rotate() {
      const k = await newKey(`key-${keys.length + 1}`);
      keys.push(k);
      return k.kid;
    },
    down(parts) {
      if (parts.discovery !== undefined) isDown.discovery = parts.discovery;
      if (parts.keys !== undefined) isDown.keys = parts.keys;
    },
    addUser(name, user) {
      users.set(name, user);
    },
    async login(name, scope, audience) {
      const res = await fetch(`${base}/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ grant_type: "password", username: name, scope, audience }).toString(),
      });
      if (!res.ok) throw new Error(`/token answered ${res.status}`);
      return ((await res.json()) as { access_token: string }).access_token;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
