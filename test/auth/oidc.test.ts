// OIDC JWTs verified against a JWKS served on localhost by the test: found
// through discovery or OIDC_JWKS_URL, scopes from `scope` or `scp`, audience
// checked when configured; every forgery or expiry is 401.
import { Code, ConnectError } from "@connectrpc/connect";
import { UnsecuredJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAuthenticator } from "../../src/auth/index.js";
import { loadConfig } from "../../src/config.js";
import { startProvider, type TestProvider } from "./oidc-provider.js";

let idp: TestProvider;
beforeAll(async () => {
  idp = await startProvider();
});
afterAll(async () => {
  await idp?.close();
});

// The authenticator on its own (the service requires OIDC_AUDIENCE with
// OIDC_ISSUER, see test/server/config.test.ts; unset it is not checked here).
const authOf = (env: Record<string, string>) =>
  createAuthenticator({
    ...loadConfig({ ...env, OIDC_AUDIENCE: "resource-store" }).auth,
    oidcAudience: env.OIDC_AUDIENCE,
  });

async function outcome(p: Promise<{ scopes: ReadonlySet<string> }>): Promise<string> {
  try {
    return [...(await p).scopes].sort().join(",") || "(none)";
  } catch (err) {
    return Code[ConnectError.from(err).code];
  }
}

describe("OIDC", () => {
  it("finds the JWKS through discovery and reads scopes from `scope`", async () => {
    const auth = authOf({ OIDC_ISSUER: idp.issuer });
    expect(auth.enabled).toBe(true);
    const before = idp.hits.get("/.well-known/openid-configuration") ?? 0;
    expect(await outcome(auth.authenticate(`Bearer ${await idp.sign({ scope: "openid read write" })}`))).toBe(
      "read,write",
    );
    expect(idp.hits.get("/.well-known/openid-configuration")).toBe(before + 1);
  });

  it("reads `scp` as an array or a string, ignoring unknown scopes", async () => {
    const auth = authOf({ OIDC_ISSUER: idp.issuer });
    expect(await outcome(auth.authenticate(`Bearer ${await idp.sign({ scp: ["admin", "email"] })}`))).toBe("admin");
    expect(await outcome(auth.authenticate(`Bearer ${await idp.sign({ scp: "read" })}`))).toBe("read");
    expect(await outcome(auth.authenticate(`Bearer ${await idp.sign({})}`))).toBe("(none)");
  });

  it("uses OIDC_JWKS_URL without discovery", async () => {
    const before = idp.hits.get("/.well-known/openid-configuration") ?? 0;
    const auth = authOf({ OIDC_ISSUER: idp.issuer, OIDC_JWKS_URL: idp.jwksUrl });
    expect(await outcome(auth.authenticate(`Bearer ${await idp.sign({ scope: "read" })}`))).toBe("read");
    expect(idp.hits.get("/.well-known/openid-configuration") ?? 0).toBe(before);
  });

  it("checks the audience when OIDC_AUDIENCE is set", async () => {
    const auth = authOf({ OIDC_ISSUER: idp.issuer, OIDC_AUDIENCE: "resource-store" });
    expect(
      await outcome(auth.authenticate(`Bearer ${await idp.sign({ scope: "read" }, { audience: "resource-store" })}`)),
    ).toBe("read");
    expect(await outcome(auth.authenticate(`Bearer ${await idp.sign({ scope: "read" }, { audience: "other" })}`))).toBe(
      "Unauthenticated",
    );
    expect(await outcome(auth.authenticate(`Bearer ${await idp.sign({ scope: "read" })}`))).toBe("Unauthenticated");
  });

  it("refuses expired, foreign-issuer, foreign-key, unsigned and mangled tokens", async () => {
    const auth = authOf({ OIDC_ISSUER: idp.issuer });
    const good = await idp.sign({ scope: "admin" });
    const [h, p, s] = good.split(".") as [string, string, string];
    const forged = `${h}.${Buffer.from(JSON.stringify({ iss: idp.issuer, sub: "x", scope: "admin", exp: 9e9 })).toString("base64url")}.${s}`;
    const tokens = [
      await idp.sign({ scope: "admin" }, { expiresIn: Math.floor(Date.now() / 1000) - 3600 }),
      await idp.sign({ scope: "admin" }, { issuer: "http://evil.example" }),
      await idp.sign({ scope: "admin" }, { foreignKey: true }),
      new UnsecuredJWT({ scope: "admin" }).setIssuer(idp.issuer).setExpirationTime("5m").encode(),
      forged,
      `${h}.${p}.`,
      `${h}.${p}.${s}x`,
    ];
    for (const t of tokens) expect(await outcome(auth.authenticate(`Bearer ${t}`))).toBe("Unauthenticated");
  });

  it("answers unavailable (not 401) while the issuer cannot be reached", async () => {
    const down = await startProvider();
    const issuer = down.issuer;
    const token = await down.sign({ scope: "read" });
    await down.close();
    const auth = authOf({ OIDC_ISSUER: issuer });
    expect(await outcome(auth.authenticate(`Bearer ${token}`))).toBe("Unavailable");
  });
});
