// CORS_ORIGINS as src/config.ts reads it: unset, "*", a list of origins;
// anything else fails start-up naming the variable.
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config.js";

describe("CORS_ORIGINS", () => {
  it("is off when unset or blank", () => {
    expect(loadConfig({}).corsOrigins).toBeUndefined();
    expect(loadConfig({ CORS_ORIGINS: "  " }).corsOrigins).toBeUndefined();
  });

  it("takes * or a comma-separated list of origins (a trailing slash and case in the host are forgiven)", () => {
    expect(loadConfig({ CORS_ORIGINS: "*" }).corsOrigins).toBe("*");
    expect(
      loadConfig({ CORS_ORIGINS: "https://a.example, http://127.0.0.1:5173/,https://B.example" }).corsOrigins,
    ).toEqual(["https://a.example", "http://127.0.0.1:5173", "https://b.example"]);
  });

  for (const bad of [
    "a.example",
    "https://a.example/path",
    "ftp://a.example",
    "https://a.example,*",
    ",",
    "https://a.example?x=1",
  ]) {
    it(`refuses ${JSON.stringify(bad)}, naming the variable`, () => {
      expect(() => loadConfig({ CORS_ORIGINS: bad })).toThrow(ConfigError);
      expect(() => loadConfig({ CORS_ORIGINS: bad })).toThrow(/CORS_ORIGINS/);
    });
  }
});
