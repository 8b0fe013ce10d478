// The import-graph lint rules (eslint/import-graph.js) on a small tree made
// for the test: a new circle and an upward import fail, a tree without
// them passes. The repository itself is held to them by `npm run lint`.
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { ESLint } from "eslint";
import tseslint from "typescript-eslint";
import { afterEach, describe, expect, it } from "vitest";
import importGraph from "../../eslint/import-graph.js";

const FLOORS = [
  { name: "leaves", members: ["src/errors.ts"] },
  { name: "parts", members: ["src/store/"] },
  { name: "rpc", members: ["src/rpc/"] },
];

let dir: string | undefined;
afterEach(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

/** The messages of both rules over a tree of files (path -> text). */
async function lint(files: Record<string, string>): Promise<string[]> {
  dir = await mkdtemp(join(tmpdir(), "import-graph-"));
  for (const [path, text] of Object.entries(files)) {
    await mkdir(dirname(join(dir, path)), { recursive: true });
    await writeFile(join(dir, path), text);
  }
  const eslint = new ESLint({
    cwd: dir,
    overrideConfigFile: true,
    overrideConfig: [
      {
        files: ["**/*.ts"],
        languageOptions: { parser: tseslint.parser },
        plugins: { graph: importGraph },
        rules: {
          "graph/no-import-cycle": ["error", { folders: ["src"] }],
          "graph/floors": ["error", { floors: FLOORS }],
        },
      },
    ],
  });
  const results = await eslint.lintFiles(["src/**/*.ts"]);
  return results.flatMap((r) => r.messages.map((m) => `${r.filePath.slice(dir!.length + 1)}: ${m.message}`)).sort();
}

describe("import-graph lint rules", () => {
  it("passes a tree whose imports run down and never round", async () => {
    expect(
      await lint({
        "src/errors.ts": "export const e = 1;\n",
        "src/store/db.ts": 'import { e } from "../errors.js";\nexport const d = e;\n',
        "src/rpc/service.ts":
          'import { d } from "../store/db.js";\nimport type { e } from "../errors.js";\nexport const s = d;\n',
      }),
    ).toEqual([]);
  });

  it("fails on a circle, type-only and three files long included", async () => {
    const messages = await lint({
      "src/errors.ts": "export const e = 1;\n",
      "src/store/db.ts": 'import { w } from "./replicas.js";\nexport interface Db { q(): void }\nexport const d = w;\n',
      "src/store/replicas.ts": 'import { ts } from "./sql.js";\nexport const w = ts;\n',
      "src/store/sql.ts": 'import type { Db } from "./db.js";\nexport const ts = (db?: Db) => db;\n',
    });
    expect(messages).toEqual([
      "src/store/db.ts: this import closes a circle: src/store/db.ts -> src/store/replicas.ts -> src/store/sql.ts -> src/store/db.ts",
      "src/store/replicas.ts: this import closes a circle: src/store/replicas.ts -> src/store/sql.ts -> src/store/db.ts -> src/store/replicas.ts",
      "src/store/sql.ts: this import closes a circle: src/store/sql.ts -> src/store/db.ts -> src/store/replicas.ts -> src/store/sql.ts",
    ]);
  });

  it("fails on an import from a floor above, and on a file on no floor", async () => {
    const messages = await lint({
      "src/errors.ts": "export const e = 1;\n",
      "src/store/db.ts":
        'export const d = 1;\nexport async function later() { return (await import("../rpc/service.js")).s; }\n',
      "src/rpc/service.ts": "export const s = 1;\n",
      "src/stray.ts": "export const x = 1;\n",
    });
    expect(messages).toEqual([
      "src/store/db.ts: src/rpc/service.ts is on the floor 'rpc', above this file's 'parts': an import may only go down (docs/architecture.md)",
      "src/stray.ts: src/stray.ts is on no floor: add it to a floor in eslint.config.js and docs/architecture.md",
    ]);
  });
});
