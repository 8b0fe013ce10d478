import { defineConfig } from "vitest/config";

/**
 * Files that need a process of their own: they replace modules (vi.mock)
 * that the other files import as they are, or they register OpenTelemetry's
 * globals and patch `pg` (tracing), or check that nothing did (tracing off).
 * test/tools/test-isolation.test.ts fails when a file that does so is not
 * named here.
 */
export const ISOLATED = [
  "test/tracing/client-gone.test.ts",
  "test/tracing/off.test.ts",
  "test/tracing/tracing.test.ts",
  "test/events/feed-lane.test.ts",
  "test/parquet/encoder-pool.test.ts",
  "test/wire/client-planned-answers.test.ts",
];

export default defineConfig({
  test: {
    // One initialised PGlite directory per run, copied by every embedded test server.
    globalSetup: ["test/support/global-setup.ts"],
    // Property failures name the error that failed them (for CI's summary).
    setupFiles: ["test/support/fast-check-setup.ts"],
    pool: "forks",
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Wire tests bind ports and store tests make databases; two workers
    // match the machines this runs on.
    maxWorkers: 2,
    projects: [
      {
        extends: true,
        test: {
          name: "shared",
          include: ["test/**/*.test.ts"],
          exclude: ISOLATED,
          // A worker imports the service once and runs file after file in it
          // (README, "Development"): every app a test builds is its own
          // (src/app.ts keeps no state in a module), and forking and
          // importing again for each of ~180 files cost 15% of the suite's
          // wall time (621 s against 526 s, the same machine).
          isolate: false,
        },
      },
      { extends: true, test: { name: "isolated", include: ISOLATED } },
    ],
  },
});
