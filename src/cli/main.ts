// The entry point of the `resource-store` command (bin/resource-store.js
// loads the compiled form of this file).
import { buildProgram } from "./program.js";

buildProgram()
  .parseAsync(process.argv)
  .catch((err: unknown) => {
    process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  });
