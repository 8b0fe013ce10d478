// Debian's Chromium driven by playwright-core: never a browser download.
// A missing browser fails the test run with what to install (CI installs
// it in .ci/run); it never skips.
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { chromium, type Browser } from "playwright-core";

export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

/** Screenshots and downloads of the test run (git-ignored). */
export const ARTEFACTS = join(import.meta.dirname, "..", "..", "test-artefacts", "browser");

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `the browser tests need Chromium at ${CHROMIUM}: install it with \`apt-get install chromium\` (Debian) or set CHROMIUM_PATH`,
    );
  }
  await mkdir(ARTEFACTS, { recursive: true });
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--no-first-run",
    ],
  });
}
