import { availableParallelism } from "node:os";
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
    expect(c.parquetEncoderWorkers).toBe(Math.min(2, availableParallelism()));
    expect(loadConfig({ PARQUET_ENCODER_WORKERS: "3" }).parquetEncoderWorkers).toBe(3);
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
    ["HEADERS_TIMEOUT_MS", "0"],
    ["MAX_CONNECTIONS", "many"],
    ["MAX_TREE_DEPTH", "0"],
    ["MAX_FILTER_DEPTH", "-1"],
    ["MAX_CONCURRENT_EXPORTS", "0"],
    ["PARQUET_ENCODER_WORKERS", "0"],
    ["PARQUET_ENCODER_WORKERS", "two"],
    ["MAX_PREVIEW_BYTES", "1"],
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

  it("fills the defence limits with the defaults of docs/contract/16-limits.md", () => {
    expect(loadConfig({}).defence).toEqual({
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 120_000,
      idleTimeoutMs: 65_000,
      maxConnections: 10_000,
      maxConcurrentStreams: 100,
      maxTreeDepth: 64,
      maxChildren: 10_000,
      maxFilterDepth: 8,
      maxConcurrentExports: 4,
      exportQueueMs: 10_000,
      exportStallMs: 60_000,
      maxPreviewBytes: 67_108_864,
      databaseStatementTimeoutMs: 300_000,
      databaseIdleInTransactionMs: 120_000,
    });
  });

  it("requires OIDC_AUDIENCE with OIDC_ISSUER, naming it", () => {
    expect(() => loadConfig({ OIDC_ISSUER: "https://idp.example" })).toThrow(/OIDC_AUDIENCE/);
    expect(loadConfig({ OIDC_ISSUER: "https://idp.example", OIDC_AUDIENCE: "rs" }).auth.oidcAudience).toBe("rs");
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
