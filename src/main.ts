// The entry point of `npm start`: read the configuration, build the app,
// listen, and shut down gracefully on SIGTERM or SIGINT.
import { assertSafeBind, createAuthenticator } from "./auth/index.js";
import { ConfigError, loadConfig } from "./config.js";
import { createApp } from "./app.js";
import { assertCorsSafe } from "./cors.js";
import { createLogger } from "./log.js";
import { startServer } from "./server.js";
import { receiverConfigFrom, type ReceiverConfig } from "./dicom/receiver-config.js";

async function main(): Promise<void> {
  let config;
  let auth;
  // The identity provider's failures are logged once the logger exists (it needs the configuration).
  let warn: (message: string) => void = () => undefined;
  let dicom: ReceiverConfig | undefined;
  try {
    config = loadConfig();
    dicom = receiverConfigFrom(process.env, config.host, config.dataDir);
    auth = createAuthenticator(config.auth, { onKeyFetchFailure: (message) => warn(message) });
    assertSafeBind(config.host, auth.enabled);
    assertCorsSafe(config.corsOrigins, auth.enabled);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const log = createLogger(config.logLevel);
  warn = (message) =>
    log.warn(
      { error: message },
      "the identity provider's keys could not be fetched; the last good keys serve until OIDC_JWKS_MAX_STALE_MS",
    );
  const app = await createApp(config, log, { auth });
  const server = await startServer({
    port: config.port,
    host: config.host,
    handler: app.handler,
    limits: config.defence,
  });
  log.info({ host: server.host, port: server.port, database: app.db.kind, auth: auth.enabled }, "listening");
  // DICOM_PORT: a C-STORE/C-ECHO receiver beside the API (docs/dicom.md).
  const receiver =
    dicom === undefined
      ? undefined
      : await (await import("./dicom/receiver.js")).startDicomReceiver(dicom, app.localTransport, log);

  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "shutting down: draining in-flight calls");
    void (async () => {
      // Change-feed streams never finish on their own: end them now, so they
      // close cleanly instead of holding the drain for the whole grace period.
      await Promise.all([app.endStreams(), server.close(config.shutdownGraceMs), receiver?.close()]);
      await app.close();
      log.info("stopped");
      process.exit(0);
    })();
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
}

main().catch((err: unknown) => {
  process.stderr.write(`failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
