// The project's shell scripts parse: CI's own script runs only on a clean
// clone at a stop, so a quoting slip in it (an apostrophe inside its
// single-quoted node summary once ended the quote) would otherwise be found
// only after every test had run, by a summary step that cannot start.
import { execFileSync, spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";

const scripts = execFileSync("git", ["ls-files", "*.sh", ".ci/run"], { encoding: "utf8" })
  .split("\n")
  .filter((f) => f !== "");

describe("shell scripts", () => {
  it("the list holds CI's script and the test scripts", () => {
    expect(scripts).toContain(".ci/run");
    expect(scripts.length).toBeGreaterThanOrEqual(2);
  });

  it.each(scripts)("%s parses (bash -n)", (file) => {
    const r = spawnSync("bash", ["-n", file], { encoding: "utf8" });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
  });

  it("bash -n refuses the slip it is here for", () => {
    const r = spawnSync("bash", ["-n"], {
      input: "node -e '\n// a test's seed\nconsole.log(1);\n' x\n",
      encoding: "utf8",
    });
    expect(r.status).not.toBe(0);
  });
});
