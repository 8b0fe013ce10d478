// vitest.config.ts runs most test files one after another in a shared worker
// process (isolate: false), where a module is imported once for all of them.
// A file that replaces a module (vi.mock and the like), registers
// OpenTelemetry's globals, or checks that nothing registered them would
// change, or be changed by, the files beside it: such a file must be in the
// config's ISOLATED list, which gives each of them a process of its own.
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import config, { ISOLATED } from "../../vitest.config.js";

const SHARED_STATE = [
  /\bvi\.(mock|doMock|unmock|stubEnv|stubGlobal|resetModules)\(/,
  /\b(createTracing|startTracing)\b/,
  /@opentelemetry\/sdk-/,
  /opentelemetry\.js\.api/,
];

async function testFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries
    .filter((e) => e.isFile() && e.name.endsWith(".test.ts"))
    .map((e) => relative(process.cwd(), join(e.parentPath, e.name)))
    .sort();
}

/** Every test file, read once for the checks below. */
const allFiles = testFiles("test");

/** This file, which names the patterns it looks for. */
const SELF = relative(process.cwd(), fileURLToPath(import.meta.url));

/** Whether a file's text touches what the shared worker shares. */
const touchesShared = (text: string): boolean => SHARED_STATE.some((re) => re.test(text));

describe("test files that touch process-wide state run isolated", () => {
  it("every such file is in vitest.config.ts's ISOLATED list", async () => {
    const files = await allFiles;
    const touching: string[] = [];
    for (const file of files) if (file !== SELF && touchesShared(await readFile(file, "utf8"))) touching.push(file);
    expect(touching.length).toBeGreaterThan(0);
    expect(touching.filter((f) => !ISOLATED.includes(f))).toEqual([]);
  });

  it("every file the list names exists (a renamed one would run shared)", async () => {
    const files = await allFiles;
    expect(ISOLATED.filter((f) => !files.includes(f))).toEqual([]);
  });

  it("the detector sees a module mock and a tracing start", () => {
    expect(touchesShared(`vi.mock("../../src/log.js");`)).toBe(true);
    expect(touchesShared(`const t = createTracing({ exporter });`)).toBe(true);
    expect(touchesShared(`import { createTestDatabase } from "../support/postgres.js";`)).toBe(false);
  });

  it("the shared project excludes the list and the isolated one runs it", () => {
    const projects = (config.test?.projects ?? []) as {
      test?: { name?: string; isolate?: boolean; include?: string[]; exclude?: string[] };
    }[];
    const shared = projects.find((p) => p.test?.name === "shared")?.test;
    const isolated = projects.find((p) => p.test?.name === "isolated")?.test;
    expect(shared?.isolate).toBe(false);
    expect(shared?.exclude).toEqual(ISOLATED);
    expect(isolated?.isolate).not.toBe(false);
    expect(isolated?.include).toEqual(ISOLATED);
  });
});
