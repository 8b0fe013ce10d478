// The identity provider's keys (docs/contract/12-authentication.md): the
// last good JWKS is kept through an outage for OIDC_JWKS_MAX_STALE_MS, every
// fetch goes through one global rate limit with backoff after failures, a
// rotated key is accepted at once (after at most one rate-limit interval),
// and a flood of tokens naming unknown keys, or of garbage, costs the
// provider a bounded number of requests. Counted at the provider; no test
// here asserts a time (the clock the verifier reads is the test's).
import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createOidcVerifier, type OidcOptions } from "../../src/auth/index.js";
import { startProvider, type TestProvider } from "./oidc-provider.js";

let idp: TestProvider;
beforeEach(async () => {
  idp = await startProvider();
});
afterEach(async () => {
  await idp?.close();
});

const DISCOVERY = "/.well-known/openid-configuration";
const hits = (path: string) => idp.hits.get(path) ?? 0;

async function outcome(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return "ok";
  } catch (err) {
    return Code[ConnectError.from(err).code];
  }
}

const verifierOf = (extra: Partial<OidcOptions> = {}) => createOidcVerifier({ issuer: idp.issuer, ...extra });

describe("a flood", () => {
  it("of tokens naming unknown keys costs the provider two JWKS requests, not one each", async () => {
    const v = verifierOf();
    const flood = await Promise.all(
      Array.from({ length: 200 }, (_, i) => idp.sign({ scope: "read" }, { kid: `unknown-${i}` })),
    );
    const outcomes = await Promise.all(flood.map((t) => outcome(v.verify(t))));
    expect(new Set(outcomes)).toEqual(new Set(["Unauthenticated"]));
    // The first fetch (no keys yet), then one fetch after it that every unknown kid waited for.
    expect(hits("/keys")).toBeLessThanOrEqual(2);
    expect(hits(DISCOVERY)).toBe(1);
    // A good token still passes, without another request.
    expect(await outcome(v.verify(await idp.sign({ scope: "read" })))).toBe("ok");
    expect(hits("/keys")).toBeLessThanOrEqual(2);
  });

  it("of garbage costs nothing: a token whose header names no usable algorithm is refused before any fetch", async () => {
    const v = verifierOf();
    const header = (h: object) => Buffer.from(JSON.stringify(h)).toString("base64url");
    const garbage = Array.from({ length: 300 }, (_, i) =>
      i % 3 === 0
        ? `a${i}.b.c`
        : i % 3 === 1
          ? `${header({ alg: "none" })}.e30.`
          : `${header({ alg: "HS256", kid: "test-key" })}.e30.c2ln`,
    );
    for (const t of garbage) expect(await outcome(v.verify(t))).toBe("Unauthenticated");
    expect(hits(DISCOVERY) + hits("/keys")).toBe(0);
  });

  it("while discovery fails, backs off: 300 tokens in a row cost one discovery request", async () => {
    idp.down({ discovery: true });
    let now = 1_000_000;
    const v = verifierOf({ now: () => now });
    const at = { iat: Math.floor(now / 1000), expiresIn: Math.floor(now / 1000) + 7200 };
    const tokens = await Promise.all(
      Array.from({ length: 300 }, (_, i) => idp.sign({ scope: "read" }, { kid: `k-${i % 7}`, ...at })),
    );
    for (const t of tokens) expect(await outcome(v.verify(t))).toBe("Unavailable");
    expect(hits(DISCOVERY)).toBe(1);
    // Once the backoff has passed (the clock moved on), one more attempt; discovery is back, and a token passes.
    idp.down({ discovery: false });
    now += 60_000;
    expect(await outcome(v.verify(await idp.sign({ scope: "read" }, at)))).toBe("ok");
    expect(hits(DISCOVERY)).toBe(2);
  });
});

describe("a flood while the JWKS answers errors", () => {
  it("costs it one request, then one per backoff step, not one a token", async () => {
    idp.down({ keys: true });
    let now = 1_000_000;
    const failures: string[] = [];
    const v = verifierOf({ jwksUrl: idp.jwksUrl, now: () => now, onFetchFailure: (m) => failures.push(m) });
    const at = { iat: Math.floor(now / 1000), expiresIn: Math.floor(now / 1000) + 7200 };
    const tokens = await Promise.all(
      Array.from({ length: 200 }, (_, i) => idp.sign({ scope: "read" }, { kid: `k-${i}`, ...at })),
    );
    for (const t of tokens) expect(await outcome(v.verify(t))).toBe("Unavailable");
    expect(hits("/keys")).toBe(1);
    // Two seconds on (the first backoff step): one more attempt, which fails too; the next waits four.
    now += 2_000;
    for (const t of tokens.slice(0, 50)) expect(await outcome(v.verify(t))).toBe("Unavailable");
    expect(hits("/keys")).toBe(2);
    now += 2_000;
    for (const t of tokens.slice(0, 50)) expect(await outcome(v.verify(t))).toBe("Unavailable");
    expect(hits("/keys")).toBe(2);
    // Each failed fetch is told (the service logs it), without the token.
    expect(failures).toEqual(["JWKS answered 503", "JWKS answered 503"]);
  });
});

describe("rotation", () => {
  it("accepts a token signed with a new key, also right after a flood of unknown kids", async () => {
    const v = verifierOf();
    expect(await outcome(v.verify(await idp.sign({ scope: "read" })))).toBe("ok");
    const flood = await Promise.all(
      Array.from({ length: 50 }, (_, i) => idp.sign({ scope: "read" }, { kid: `nope-${i}` })),
    );
    await Promise.all(flood.map((t) => v.verify(t).catch(() => undefined)));
    const kid = await idp.rotate();
    const rotated = await idp.sign({ scope: "read" });
    expect(JSON.parse(Buffer.from(rotated.split(".")[0] as string, "base64url").toString()).kid).toBe(kid);
    expect(await outcome(v.verify(rotated))).toBe("ok");
  });
});

describe("an outage", () => {
  it("keeps the last good keys past their refresh time, up to OIDC_JWKS_MAX_STALE_MS", async () => {
    let now = 1_000_000;
    const v = verifierOf({ now: () => now, maxAgeMs: 600_000, maxStaleMs: 3_600_000 });
    const token = () =>
      idp.sign({ scope: "read" }, { iat: Math.floor(now / 1000), expiresIn: Math.floor(now / 1000) + 7200 });
    expect(await outcome(v.verify(await token()))).toBe("ok");
    idp.down({ discovery: true, keys: true });
    // Ten minutes and one second on: the keys are due for a refresh, which fails; the token still passes.
    now += 601_000;
    expect(await outcome(v.verify(await token()))).toBe("ok");
    // Fifty minutes later (within ten minutes plus the hour): still.
    now += 3_000_000;
    expect(await outcome(v.verify(await token()))).toBe("ok");
    // Past the limit the operator set: the keys are no longer used, and the provider cannot be reached.
    now += 600_000;
    expect(await outcome(v.verify(await token()))).toBe("Unavailable");
    // The provider is back: the next attempt the backoff allows fetches again.
    idp.down({ discovery: false, keys: false });
    now += 60_000;
    expect(await outcome(v.verify(await token()))).toBe("ok");
  });

  it("costs the provider a few requests, not one a call", async () => {
    let now = 1_000_000;
    const v = verifierOf({ now: () => now, maxAgeMs: 0 });
    const token = await idp.sign(
      { scope: "read" },
      { iat: Math.floor(now / 1000), expiresIn: Math.floor(now / 1000) + 7200 },
    );
    expect(await outcome(v.verify(token))).toBe("ok");
    idp.down({ keys: true });
    const before = hits("/keys");
    for (let i = 0; i < 100; i++) {
      now += 10; // one second of calls, 10 ms apart
      expect(await outcome(v.verify(token))).toBe("ok");
      await new Promise((r) => setImmediate(r));
    }
    // One refetch a second at most (the rate limit), fewer once it fails (the backoff).
    expect(hits("/keys") - before).toBeLessThanOrEqual(2);
  });
});
