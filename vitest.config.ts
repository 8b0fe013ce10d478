import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
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
  },
});
