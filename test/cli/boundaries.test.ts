// The command line reaches the rest of the project through its public
// surfaces only (docs/architecture.md): the flat codec is the schema's, so the CLI needs
// no eslint-disable line to reach it, and no copy of REST's is left behind.
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { expect, it } from "vitest";
import { ROOT } from "./run-cli.js";

it("src/cli and src/client silence no lint rule, and the flat codec lives under src/schema", async () => {
  const offenders: string[] = [];
  for (const dir of ["src/cli", "src/client"]) {
    for (const name of await readdir(join(ROOT, dir))) {
      const text = await readFile(join(ROOT, dir, name), "utf8");
      if (text.includes("eslint-disable")) offenders.push(`${dir}/${name}`);
    }
  }
  expect(offenders).toEqual([]);
  expect((await stat(join(ROOT, "src/schema/flat-codec.ts"))).isFile()).toBe(true);
  await expect(stat(join(ROOT, "src/rest/flat-codec.ts"))).rejects.toThrow();
});
