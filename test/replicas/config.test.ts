// DATABASE_READ_URLS and its two bounds (docs/scaling.md): parsed in config.ts, errors name the variable.
import { describe, expect, it } from "vitest";
import { ConfigError, DEFAULTS, loadConfig } from "../../src/config.js";

const primary = { DATABASE_URL: "postgres://db-primary/rs" };

describe("read standby configuration", () => {
  it("is empty by default, with the default bounds", () => {
    expect(loadConfig(primary).readReplicas).toEqual({
      urls: [],
      timeoutMs: DEFAULTS.DATABASE_READ_TIMEOUT_MS,
      stampTtlMs: DEFAULTS.DATABASE_READ_STAMP_TTL_MS,
    });
  });

  it("takes a comma-separated list in order, spaces and empty entries ignored", () => {
    const c = loadConfig({
      ...primary,
      DATABASE_READ_URLS: " postgres://standby-a/rs , ,postgresql://standby-b:5433/rs",
      DATABASE_READ_TIMEOUT_MS: "250",
      DATABASE_READ_STAMP_TTL_MS: "0",
    });
    expect(c.readReplicas).toEqual({
      urls: ["postgres://standby-a/rs", "postgresql://standby-b:5433/rs"],
      timeoutMs: 250,
      stampTtlMs: 0,
    });
  });

  it.each([
    [{ ...primary, DATABASE_READ_URLS: "postgres://a/rs,not a url" }, "DATABASE_READ_URLS", "entry 2 is not a URL"],
    [{ ...primary, DATABASE_READ_URLS: "http://a/rs" }, "DATABASE_READ_URLS", "entry 1 must be a postgres"],
    [{ DATABASE_READ_URLS: "postgres://a/rs" }, "DATABASE_READ_URLS", "needs DATABASE_URL"],
    [{ ...primary, DATABASE_READ_TIMEOUT_MS: "0" }, "DATABASE_READ_TIMEOUT_MS", "between 1 and"],
    [{ ...primary, DATABASE_READ_STAMP_TTL_MS: "soon" }, "DATABASE_READ_STAMP_TTL_MS", "whole number"],
  ])("refuses %j", (env, variable, message) => {
    let err: unknown;
    try {
      loadConfig(env);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).variable).toBe(variable);
    expect((err as ConfigError).message).toContain(message);
  });

  it("never quotes an entry, which may carry a password", () => {
    expect(() =>
      loadConfig({ ...primary, DATABASE_READ_URLS: "postgres://u:hunter2@a/rs,postgres://u:hunter2@ b" }),
    ).toThrow(/^(?!.*hunter2)/);
  });
});
