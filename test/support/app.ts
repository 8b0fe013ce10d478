// A real server on port 0 for wire tests: the same app as `npm start`, on an
// embedded PGlite (or a PostgreSQL database of the test's own) and an embedded
// s3rver, in a temporary data directory removed afterwards.
import { cp, mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp, type App, type AppOptions } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { createLogger, type Logger } from "../../src/log.js";
import { startServer, type RunningServer } from "../../src/server.js";
import { inject } from "vitest";
import { withRegistryKey } from "./registry-key.js";

export interface TestServer {
  readonly url: string;
  readonly port: number;
  readonly app: App;
  readonly server: RunningServer;
  close(): Promise<void>;
}

/** `logger` replaces the one LOG_LEVEL would make (a test that reads the log passes its own). */
export async function startTestServer(
  env: Record<string, string> = {},
  opts: AppOptions = {},
  logger?: Logger,
): Promise<TestServer> {
  const dataDir = await mkdtemp(join(tmpdir(), "rs-test-"));
  const config = loadConfig(
    withRegistryKey({ PORT: "0", HOST: "127.0.0.1", DATA_DIR: dataDir, LOG_LEVEL: "silent", ...env }),
  );
  // On the embedded backend, start from a copy of the run's initialised
  // PGlite directory (test/support/global-setup.ts) instead of paying initdb.
  const pglite = join(config.dataDir, "pglite");
  if (
    config.databaseUrl === undefined &&
    !(await stat(pglite).then(
      () => true,
      () => false,
    ))
  ) {
    await cp(inject("pgliteTemplate"), pglite, { recursive: true });
  }
  const app = await createApp(config, logger ?? createLogger(config.logLevel), opts);
  const server = await startServer({ port: 0, host: "127.0.0.1", handler: app.handler, limits: config.defence });
  return {
    url: `http://127.0.0.1:${server.port}`,
    port: server.port,
    app,
    server,
    async close() {
      await Promise.all([app.endStreams(), server.close(1000)]);
      await app.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
