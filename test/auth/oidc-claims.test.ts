// What a JWT's claims give (docs/contract/12-authentication.md, 18-access.md,
// 19-audit-history.md): grants from the claim the operator names, nothing
// (or OIDC_DEFAULT_GRANTS) for a token that carries no grant, malformed
// grant strings that narrow and never widen, `exp` required, `iat` not in
// the future, the actor namespaced; and static tokens whose configuration
// cannot silently turn authentication off or take a reserved actor name.
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ALL_GRANTS, type Grants } from "../../src/access/index.js";
import { createAuthenticator, grantsOfClaim, parseDefaultGrants, type Principal } from "../../src/auth/index.js";
import { ConfigError, loadConfig } from "../../src/config.js";
import { startProvider, type TestProvider } from "./oidc-provider.js";

const dsList = (g: Grants) => (g.datasources === "all" ? "*" : [...g.datasources].sort().join(","));
const show = (g: Grants) => `${dsList(g)}@${g.clearance}`;

let idp: TestProvider;
beforeAll(async () => {
  idp = await startProvider();
});
afterAll(async () => {
  await idp?.close();
});

const authOf = (env: Record<string, string> = {}) =>
  createAuthenticator(loadConfig({ OIDC_ISSUER: idp.issuer, OIDC_AUDIENCE: "rs", ...env }).auth);

async function principal(
  env: Record<string, string>,
  claims: Record<string, unknown>,
  opts: Parameters<TestProvider["sign"]>[1] = {},
): Promise<Principal | string> {
  try {
    return await authOf(env).authenticate(`Bearer ${await idp.sign(claims, { audience: "rs", ...opts })}`);
  } catch (err) {
    return Code[ConnectError.from(err).code];
  }
}

describe("a JWT's grants", () => {
  it("are nothing when it carries none: asking for fewer scopes never sees more", async () => {
    const full = await principal({}, { scope: "read datasource:hospital-a clearance:public" });
    const less = await principal({}, { scope: "read" });
    const bare = await principal({}, { scope: "openid" });
    expect(show((full as Principal).grants)).toBe("hospital-a@public");
    expect(show((less as Principal).grants)).toBe("@public");
    expect(show((bare as Principal).grants)).toBe("@public");
    expect([...(less as Principal).scopes]).toEqual(["read"]);
  });

  it("are read from `scp` too when `scope` holds none (unset OIDC_GRANTS_CLAIM reads both)", async () => {
    const p = await principal({}, { scope: "openid read", scp: ["datasource:hospital-a", "clearance:internal"] });
    expect(show((p as Principal).grants)).toBe("hospital-a@internal");
  });

  it("come only from OIDC_GRANTS_CLAIM when it is set, whatever the client asked for", async () => {
    const env = { OIDC_GRANTS_CLAIM: "grants" };
    const p = await principal(env, {
      scope: "read datasource:* clearance:restricted",
      grants: ["datasource:hospital-b", "clearance:internal"],
    });
    expect(show((p as Principal).grants)).toBe("hospital-b@internal");
    expect([...(p as Principal).scopes]).toEqual(["read"]);
    // The custom claim may be a space separated string, and may hold the operation scopes too.
    const q = await principal(env, { grants: "write datasource:hospital-c" });
    expect(show((q as Principal).grants)).toBe("hospital-c@public");
    expect([...(q as Principal).scopes]).toEqual(["write"]);
    // `scp` alone, as Entra and Okta issue it.
    const r = await principal(
      { OIDC_GRANTS_CLAIM: "scp" },
      { scope: "datasource:*", scp: "read datasource:hospital-a" },
    );
    expect(show((r as Principal).grants)).toBe("hospital-a@public");
  });

  it("take OIDC_DEFAULT_GRANTS on an axis the token carries none for", async () => {
    const env = { OIDC_DEFAULT_GRANTS: "datasource:hospital-a,clearance:internal" };
    expect(show(((await principal(env, { scope: "read" })) as Principal).grants)).toBe("hospital-a@internal");
    expect(show(((await principal(env, { scope: "read datasource:hospital-b" })) as Principal).grants)).toBe(
      "hospital-b@internal",
    );
    expect(show(((await principal(env, { scope: "read clearance:public" })) as Principal).grants)).toBe(
      "hospital-a@public",
    );
    // Everything, as before this rule, only when the operator says so.
    const all = await principal({ OIDC_DEFAULT_GRANTS: "datasource:* clearance:restricted" }, { scope: "read" });
    expect((all as Principal).grants).toBe(ALL_GRANTS);
  });

  it("refuses a malformed OIDC_DEFAULT_GRANTS at start-up", () => {
    for (const bad of ["clearance:secret", "read", "datasource:", "actor:x"]) {
      expect(() => parseDefaultGrants(bad), bad).toThrow(ConfigError);
      expect(() => authOf({ OIDC_DEFAULT_GRANTS: bad }), bad).toThrow(/OIDC_DEFAULT_GRANTS/);
    }
  });

  // Each string holds a grant the token meant and a way of writing it that does not parse.
  const MALFORMED: [string, unknown][] = [
    ["a comma", "read clearance:internal,datasource:hospital-a"],
    ["a leading space in an array element", ["read", " datasource:hospital-a"]],
    ["a space before the colon", ["read", "clearance :public"]],
    ["a tab as separator", "read\tdatasource:hospital-a"],
    ["a newline as separator", "read\ndatasource:hospital-a clearance:public"],
    ["a homoglyph (Cyrillic a)", "read d\u0430tasource:hospital-a"],
    ["an unknown level", "read clearance:top-secret"],
    ["an empty datasource", "read datasource:"],
    ["a number in the array", ["read", 7]],
    ["datasource without a colon", "read datasource=hospital-a"],
  ];

  it.each(MALFORMED)("narrow, never widen: %s", async (_name, claim) => {
    // The widest defaults an operator could set: a malformed grant must not reach them.
    const env = { OIDC_DEFAULT_GRANTS: "datasource:* clearance:restricted", OIDC_GRANTS_CLAIM: "grants" };
    const p = (await principal(env, { scope: "read", grants: claim })) as Principal;
    expect(p.grants.datasources).not.toBe("all");
    expect(p.grants.clearance).toBe("public");
    expect(dsList(p.grants)).toBe("");
    // Beside well-formed grants, those stay and nothing is added.
    const q = grantsOfClaim(
      { grants: [...(Array.isArray(claim) ? claim : [claim]), "datasource:hospital-z", "clearance:internal"] },
      { grantsClaim: "grants", defaults: parseDefaultGrants("datasource:* clearance:restricted") },
    );
    expect(show(q)).toBe("hospital-z@internal");
  });

  it("leave other scopes alone: openid, profile and unknown plain names do not narrow", () => {
    const g = grantsOfClaim(
      { scope: "openid profile email offline_access read" },
      { defaults: parseDefaultGrants("datasource:ds-1 clearance:internal") },
    );
    expect(show(g)).toBe("ds-1@internal");
  });
});

describe("a JWT's registered claims", () => {
  it("must include `exp`, unless OIDC_ALLOW_NO_EXP is set", async () => {
    expect(await principal({}, { scope: "read" }, { noExp: true })).toBe("Unauthenticated");
    const p = (await principal({ OIDC_ALLOW_NO_EXP: "true" }, { scope: "read" }, { noExp: true })) as Principal;
    expect(p.expiresAt).toBeUndefined();
    const q = (await principal({}, { scope: "read" }, { expiresIn: "2m" })) as Principal;
    expect(q.expiresAt).toEqual(expect.any(Number));
  });

  it("refuse an `iat` in the future", async () => {
    const future = Math.floor(Date.UTC(2033, 0, 1) / 1000);
    expect(await principal({}, { scope: "read" }, { iat: future, expiresIn: future + 600 })).toBe("Unauthenticated");
    expect(await principal({}, { scope: "read" }, { iat: Math.floor(Date.now() / 1000) + 3600 })).toBe(
      "Unauthenticated",
    );
  });

  it("must name a subject", async () => {
    expect(await principal({}, { scope: "read", sub: "" })).toBe("Unauthenticated");
  });
});

describe("actors", () => {
  it("of a JWT are `oidc:<sub>`, so no subject reads as a static token or authentication off", async () => {
    const env = { API_TOKENS: "tok-1=read" };
    for (const sub of ["token#1", "local", "unknown", "alice"]) {
      expect(((await principal(env, { sub, scope: "read" })) as Principal).actor).toBe(`oidc:${sub}`);
    }
    expect((await authOf(env).authenticate("Bearer tok-1")).actor).toBe("token#1");
  });

  it.each(["local", "LOCAL", "unknown", "token#1", "Token#7", "oidc:alice", "OIDC:x"])(
    "refuses the reserved static actor name %s at start-up",
    (name) => {
      expect(() => createAuthenticator(loadConfig({ API_TOKENS: `t=write,actor:${name}` }).auth)).toThrow(/reserved/);
    },
  );
});

describe("static tokens", () => {
  it.each(["#Adm1n=admin", ";", " ; ; ", "#a=read;#b=write"])(
    "API_TOKENS=%s (no token) stops start-up instead of turning authentication off",
    (value) => {
      let err: unknown;
      try {
        createAuthenticator(loadConfig({ API_TOKENS: value }).auth);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).variable).toBe("API_TOKENS");
      expect((err as Error).message).not.toContain("Adm1n");
    },
  );

  it("refuses an entry starting with # in API_TOKENS, where it reads as a commented-out token", () => {
    expect(() => createAuthenticator(loadConfig({ API_TOKENS: "a=read;#b=admin" }).auth)).toThrow(ConfigError);
  });
});
