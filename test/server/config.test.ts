import { describe, expect, it } from "vitest";
import { ConfigError, DEFAULTS, loadConfig } from "../../src/config.js";

describe("config", () => {
  it("fills every default from one place", () => {
    const c = loadConfig({});
    expect(c.port).toBe(DEFAULTS.PORT);
    expect(c.host).toBe("127.0.0.1");
    expect(c.dataDir).toBe("./data");
    expect(c.databaseUrl).toBeUndefined();
    expect(c.logLevel).toBe("info");
    expect(c.limits.maxBatchItems).toBe(10_000);
    expect(c.limits.maxBodyBytes).toBe(64 * 1024 * 1024);
    expect(c.s3.presignExpiresSeconds).toBe(3600);
  });

  it.each([
    ["PORT", "http"],
    ["PORT", "70000"],
    ["DATABASE_URL", "mysql://x"],
    ["DATABASE_URL", "not a url"],
    ["LOG_LEVEL", "loud"],
    ["S3_FORCE_PATH_STYLE", "maybe"],
    ["S3_BUCKET", "Bad_Bucket"],
    ["MAX_BATCH_ITEMS", "0"],
  ])("rejects %s=%s naming the variable", (name, value) => {
    let err: unknown;
    try {
      loadConfig({ [name]: value });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).variable).toBe(name);
    expect((err as Error).message).toContain(name);
  });

  it("reads the documented variables", () => {
    const c = loadConfig({
      PORT: "9000",
      HOST: "0.0.0.0",
      DATA_DIR: "/tmp/x",
      DATABASE_URL: "postgres://u@h:5432/db",
      LOG_LEVEL: "DEBUG",
    });
    expect([c.port, c.host, c.dataDir, c.databaseUrl, c.logLevel]).toEqual([
      9000,
      "0.0.0.0",
      "/tmp/x",
      "postgres://u@h:5432/db",
      "debug",
    ]);
  });
});
