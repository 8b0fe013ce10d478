// A tiny OIDC provider on localhost for tests: a discovery document, a JWKS,
// and a signer for tokens with any claims.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { SignJWT, exportJWK, generateKeyPair, type JWTPayload } from "jose";

export interface TestProvider {
  readonly issuer: string;
  readonly jwksUrl: string;
  /** Requests served, by path. */
  readonly hits: Map<string, number>;
  sign(claims: JWTPayload, opts?: { expiresIn?: string | number; issuer?: string; audience?: string; foreignKey?: boolean }): Promise<string>;
  close(): Promise<void>;
}

export async function startProvider(): Promise<TestProvider> {
  const kid = "test-key";
  const { publicKey, privateKey } = await generateKeyPair("ES256");
  const other = await generateKeyPair("ES256");
  const jwk = { ...(await exportJWK(publicKey)), kid, alg: "ES256", use: "sig" };
  const hits = new Map<string, number>();
  let base = "";
  const server = http.createServer((req, res) => {
    const path = req.url ?? "/";
    hits.set(path, (hits.get(path) ?? 0) + 1);
    const send = (body: unknown) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (path === "/.well-known/openid-configuration") return send({ issuer: base, jwks_uri: `${base}/keys` });
    if (path === "/keys") return send({ keys: [jwk] });
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    issuer: base,
    jwksUrl: `${base}/keys`,
    hits,
    async sign(claims, opts = {}) {
      let jwt = new SignJWT(claims)
        .setProtectedHeader({ alg: "ES256", kid })
        .setIssuedAt()
        .setIssuer(opts.issuer ?? base)
        .setSubject(typeof claims.sub === "string" ? claims.sub : "user-1")
        .setExpirationTime(opts.expiresIn ?? "5m");
      if (opts.audience !== undefined) jwt = jwt.setAudience(opts.audience);
      return jwt.sign(opts.foreignKey ? other.privateKey : privateKey);
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
