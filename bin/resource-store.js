#!/usr/bin/env node
// The `resource-store` command (package.json "bin"): runs the compiled CLI in
// dist/. From a checkout, `npm run build` (or `npm start`) compiles it.
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const entry = new URL("../dist/src/cli/main.js", import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write(
    `resource-store: the command is not built yet; run \`npm run build\` in ${fileURLToPath(new URL("..", import.meta.url))}\n`,
  );
  process.exit(1);
}
await import(entry.href);
