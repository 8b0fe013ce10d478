// Every dependency with an install script is reviewed in package.json's
// allowScripts (npm 11.16+ reads it; npm 12 runs only what it allows), so
// `npm install` warns of nothing unreviewed (docs/operations.md), and a new
// dependency with a script fails here until someone decides (README,
// "Install scripts").
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "../..");
const json = (f: string) => JSON.parse(readFileSync(join(root, f), "utf8")) as Record<string, unknown>;

describe("install scripts", () => {
  it("are each allowed or denied by name in package.json", () => {
    const lock = json("package-lock.json") as { packages: Record<string, { hasInstallScript?: boolean }> };
    const withScripts = Object.entries(lock.packages)
      .filter(([path, p]) => path !== "" && p.hasInstallScript === true)
      .map(([path]) => path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length));
    const allow = (json("package.json").allowScripts ?? {}) as Record<string, boolean>;
    expect(Object.keys(allow).sort()).toEqual([...new Set(withScripts)].sort());
    for (const v of Object.values(allow)) expect(typeof v).toBe("boolean");
  });
});
