import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { assertSafeBind, createAuthenticator, grants, isLoopback, parseTokenEntries } from "../../src/auth/index.js";
import { ConfigError, loadConfig } from "../../src/config.js";

const authOf = (env: Record<string, string>) => createAuthenticator(loadConfig(env).auth);

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return "ok";
  } catch (err) {
    return Code[ConnectError.from(err).code];
  }
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "rs-auth-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("static tokens", () => {
  it("reads token=scope,scope;token2=scope from API_TOKENS", async () => {
    const auth = authOf({ API_TOKENS: "abc=read,write; xyz==admin ;" });
    expect(auth.enabled).toBe(true);
    const p = await auth.authenticate("Bearer abc");
    expect([...p.scopes].sort()).toEqual(["read", "write"]);
    // A token may itself end in "=" (base64 padding): the last "=" splits.
    expect([...(await auth.authenticate("bearer xyz=")).scopes]).toEqual(["admin"]);
    expect(await codeOf(auth.authenticate("Bearer xyz"))).toBe("Unauthenticated");
  });

  it("reads a file with one or more entries a line and comments", async () => {
    const file = join(dir, "tokens");
    await writeFile(file, "# tokens\nt1=read\n\nt2=write;t3=admin  # ops\n");
    const auth = authOf({ API_TOKENS_FILE: file, API_TOKENS: "t4=read" });
    for (const [t, s] of [
      ["t1", "read"],
      ["t2", "write"],
      ["t3", "admin"],
      ["t4", "read"],
    ] as const) {
      expect([...(await auth.authenticate(`Bearer ${t}`)).scopes]).toEqual([s]);
    }
  });

  it.each([
    ["API_TOKENS", "abc"],
    ["API_TOKENS", "abc=superuser"],
    ["API_TOKENS", "abc="],
    ["API_TOKENS", "=read"],
    ["API_TOKENS", "a=read;a=write"],
  ])("refuses %s=%s at start-up, naming the variable and never the token", (name, value) => {
    let err: unknown;
    try {
      authOf({ [name]: value });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).variable).toBe(name);
    expect((err as Error).message).not.toMatch(/\babc\b|\ba=/);
  });

  it("refuses an unreadable API_TOKENS_FILE without quoting its path", () => {
    const missing = join(dir, "missing-secret-file");
    expect(() => authOf({ API_TOKENS_FILE: missing })).toThrow(/API_TOKENS_FILE/);
    expect(() => authOf({ API_TOKENS_FILE: missing })).not.toThrow(/missing-secret-file/);
  });

  it.each([[null], ["abc"], ["Basic abc"], ["Bearer"], ["Bearer abc def"], ["Bearer abcd"], ["Bearer ab"]])(
    "answers unauthenticated for the header %s",
    async (header) => {
      const auth = authOf({ API_TOKENS: "abc=read" });
      expect(await codeOf(auth.authenticate(header))).toBe("Unauthenticated");
    },
  );

  it("entries are named by position only", () => {
    const entries = parseTokenEntries("secret-one=read;secret-two=write", "API_TOKENS");
    expect(entries.map((e) => e.name)).toEqual(["API_TOKENS#1", "API_TOKENS#2"]);
    expect(JSON.stringify(entries)).not.toContain("secret");
  });
});

describe("scopes", () => {
  it("admin grants write and read, write grants read, read only read", () => {
    expect(grants(new Set(["admin"]), "write")).toBe(true);
    expect(grants(new Set(["admin"]), "read")).toBe(true);
    expect(grants(new Set(["write"]), "read")).toBe(true);
    expect(grants(new Set(["write"]), "admin")).toBe(false);
    expect(grants(new Set(["read"]), "write")).toBe(false);
    expect(grants(new Set(), "read")).toBe(false);
  });
});

describe("no credentials configured", () => {
  it("turns authentication off", () => {
    expect(authOf({}).enabled).toBe(false);
  });

  it.each(["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"])("allows loopback %s", (host) => {
    expect(isLoopback(host)).toBe(true);
    expect(() => assertSafeBind(host, false)).not.toThrow();
  });

  it.each(["0.0.0.0", "::", "10.0.0.5", "example.org"])("refuses to bind %s, naming HOST", (host) => {
    expect(() => assertSafeBind(host, false)).toThrow(ConfigError);
    expect(() => assertSafeBind(host, false)).toThrow(/HOST/);
    expect(() => assertSafeBind(host, true)).not.toThrow();
  });
});
