// Grants as scopes (docs/contract/18-access.md) and actors
// (docs/contract/19-audit-history.md): what static tokens and JWTs give a
// caller, and that every call's handler sees the caller the auth interceptor
// made, on every path into a handler.
import { Code, ConnectError, createContextValues } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ALL_GRANTS, grantsKey, maySee, type Grants } from "../../src/access/index.js";
import { callerKey, callerOf, createAuthenticator } from "../../src/auth/index.js";
import { ConfigError, loadConfig } from "../../src/config.js";
import { startProvider, type TestProvider } from "./oidc-provider.js";

const authOf = (env: Record<string, string>) => createAuthenticator(loadConfig(env).auth);
const dsList = (g: Grants) => (g.datasources === "all" ? "all" : [...g.datasources].sort().join(","));

describe("grant scopes of static tokens", () => {
  it("reads datasources (case kept), clearance and actor beside the plain scopes", async () => {
    const auth = authOf({
      API_TOKENS:
        "a=read,datasource:DS-1,datasource:ds-2,clearance:Internal,actor:etl-bot;b=write;c=read,datasource:*,clearance:public",
    });
    const a = await auth.authenticate("Bearer a");
    expect([...a.scopes]).toEqual(["read"]);
    expect(dsList(a.grants)).toBe("DS-1,ds-2");
    expect(a.grants.clearance).toBe("internal");
    expect(a.actor).toBe("etl-bot");
    // No grant scopes: everything, as before grants existed; the actor is the token's position.
    const b = await auth.authenticate("Bearer b");
    expect(b.grants).toBe(ALL_GRANTS);
    expect(b.actor).toBe("token#2");
    const c = await auth.authenticate("Bearer c");
    expect(dsList(c.grants)).toBe("all");
    expect(c.grants.clearance).toBe("public");
  });

  it("numbers actors across API_TOKENS and the file alike (token#N)", async () => {
    const auth = authOf({ API_TOKENS: "x=read;y=read" });
    expect((await auth.authenticate("Bearer y")).actor).toBe("token#2");
  });

  it("refuses malformed grant scopes and a token with grants but no plain scope", () => {
    for (const bad of [
      "t=read,clearance:secret",
      "t=read,datasource:",
      "t=read,datasource:a b",
      "t=datasource:ds-1",
      "t=read,actor:a,actor:b",
    ]) {
      expect(() => authOf({ API_TOKENS: bad }), bad).toThrow(ConfigError);
    }
  });
});

describe("visibility of one resource", () => {
  it("needs the datasource granted and the level within the clearance", () => {
    const g: Grants = { datasources: new Set(["ds-1"]), clearance: "internal" };
    expect(maySee(g, "ds-1", "internal")).toBe(true);
    expect(maySee(g, "ds-1", "restricted")).toBe(false);
    expect(maySee(g, "ds-2", "public")).toBe(false);
    // A resource attributed to no datasource is governed by clearance alone.
    expect(maySee(g, null, "public")).toBe(true);
    expect(maySee(g, null, "restricted")).toBe(false);
  });

  it("keys equal grants equally", () => {
    expect(grantsKey({ datasources: new Set(["b", "a"]), clearance: "public" })).toBe(
      grantsKey({ datasources: new Set(["a", "b"]), clearance: "public" }),
    );
    expect(grantsKey({ datasources: new Set(["a"]), clearance: "public" })).not.toBe(
      grantsKey({ datasources: new Set(["a"]), clearance: "internal" }),
    );
  });
});

describe("grants in JWTs", () => {
  let idp: TestProvider;
  beforeAll(async () => {
    idp = await startProvider();
  });
  afterAll(async () => {
    await idp?.close();
  });
  const authOfIdp = () =>
    createAuthenticator({
      ...loadConfig({ OIDC_ISSUER: idp.issuer, OIDC_AUDIENCE: "resource-store" }).auth,
      oidcAudience: undefined,
    });

  it("reads them from `scope` and `scp`; the actor is `oidc:` and the subject", async () => {
    const auth = authOfIdp();
    const p = await auth.authenticate(
      `Bearer ${await idp.sign({ sub: "alice", scope: "openid read datasource:ds-9 clearance:restricted" })}`,
    );
    expect(dsList(p.grants)).toBe("ds-9");
    expect(p.grants.clearance).toBe("restricted");
    expect(p.actor).toBe("oidc:alice");
    // No datasource grant in a JWT: no datasource (not every one).
    const q = await auth.authenticate(`Bearer ${await idp.sign({ sub: "bob", scp: ["read", "clearance:internal"] })}`);
    expect(dsList(q.grants)).toBe("");
    expect(q.grants.clearance).toBe("internal");
  });

  it("a malformed clearance narrows to public instead of falling back to restricted", async () => {
    const p = await authOfIdp().authenticate(
      `Bearer ${await idp.sign({ sub: "eve", scope: "read clearance:top-secret" })}`,
    );
    expect(p.grants.clearance).toBe("public");
  });
});

describe("the caller in a handler", () => {
  it("is refused when the pipeline set none", () => {
    let code: Code | undefined;
    try {
      callerOf({ values: createContextValues() });
    } catch (err) {
      code = ConnectError.from(err).code;
    }
    expect(code).toBe(Code.Internal);
    const values = createContextValues().set(callerKey, { actor: "x", grants: ALL_GRANTS });
    expect(callerOf({ values }).actor).toBe("x");
  });
});
