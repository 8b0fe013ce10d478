// The contract lives in docs/contract/, one page per section, and code,
// tests, the CLI's help and the docs cite it by page. A citation of a page
// that does not exist, or of the old single file by section number (a file
// the repository never held), would send a reader nowhere: both fail here.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const contractDir = join(root, "docs/contract");

/** Folders and files whose text cites the contract. */
const CITING = ["src", "test", "bench", "ui", "scripts", "docs", "README.md", "BENCHMARKS.md"];
/** Never the project's own text: installed, built, generated at run time. */
const SKIP = new Set(["node_modules", ".git", "dist", "data", "coverage", "test-artefacts"]);
const TEXT = /\.(ts|tsx|js|mjs|cjs|json|md|html|css|sh|py|proto|yaml|yml|txt)$/;

function filesUnder(path: string): string[] {
  if (!existsSync(path)) return [];
  if (!statSync(path).isDirectory()) return TEXT.test(path) ? [path] : [];
  return readdirSync(path).flatMap((name) => (SKIP.has(name) ? [] : filesUnder(join(path, name))));
}

/** Every `docs/contract/<page>` a file cites, and every relative link a contract page makes, as paths that must exist. */
function citedPages(file: string, text: string): { cited: string; target: string }[] {
  const out: { cited: string; target: string }[] = [];
  // Relative markdown links (`](../contract/16-limits.md)`, `](14-events.md)` inside docs/contract) resolve from the file.
  if (file.endsWith(".md")) {
    for (const m of text.matchAll(/\]\(([^)#\s]*contract\/[^)#\s]+|[0-9]{2}-[a-z-]+\.md)(?:#[^)]*)?\)/g)) {
      const link = m[1] as string;
      if (file.startsWith(contractDir) || link.includes("contract/"))
        out.push({ cited: link, target: resolve(dirname(file), link) });
    }
  }
  // Plain citations name the page from the repository's root.
  for (const m of text.matchAll(/(?<![\w/.-])docs\/contract\/([A-Za-z0-9_.-]*)/g)) {
    const page = (m[1] as string).replace(/[.]+$/, "");
    out.push({ cited: m[0], target: join(contractDir, page) });
  }
  return out;
}

const OLD_CITATION = new RegExp(["API\\.md", "(section|§)"].join("\\s*"), "i");

describe("contract citations", () => {
  const files = CITING.flatMap((p) => filesUnder(join(root, p)));

  it("the contract has a page per section and an index", () => {
    const pages = readdirSync(contractDir).filter((n) => /^\d{2}-/.test(n));
    expect(pages.map((p) => p.slice(0, 2))).toEqual(Array.from({ length: 21 }, (_, i) => String(i).padStart(2, "0")));
    expect(existsSync(join(contractDir, "README.md"))).toBe(true);
  });

  it("every cited contract page exists", () => {
    const broken: string[] = [];
    let seen = 0;
    for (const file of files) {
      for (const { cited, target } of citedPages(file, readFileSync(file, "utf8"))) {
        seen++;
        const ok = existsSync(target) && (target === contractDir || statSync(target).isFile());
        if (!ok) broken.push(`${relative(root, file)}: ${cited}`);
      }
    }
    // The code cites the contract in dozens of places: finding none means the scan is broken, not the code clean.
    expect(seen).toBeGreaterThan(30);
    expect(broken).toEqual([]);
  });

  it("nothing outside docs/contract/ cites the contract by its old file and section number", () => {
    const old = filesUnder(root).filter(
      (f) => !f.startsWith(contractDir + "/") && OLD_CITATION.test(readFileSync(f, "utf8")),
    );
    expect(old.map((f) => relative(root, f))).toEqual([]);
  });

  it("recognises a citation of a missing page and an old citation", () => {
    const file = join(root, "src/example.ts");
    // Spelled in pieces, or this file would cite a missing page itself.
    const missing = ["docs", "contract", "99-nowhere.md"].join("/");
    const cites = citedPages(file, `// ${missing} and docs/contract/16-limits.md.`);
    expect(cites.map((c) => existsSync(c.target))).toEqual([false, true]);
    const md = citedPages(
      join(root, "docs/limits.md"),
      "see [limits](contract/16-limits.md) and [x](contract/17-nope.md#a)",
    );
    expect(md.map((c) => existsSync(c.target))).toEqual([true, false]);
    expect(OLD_CITATION.test(["// API.md", "section 16"].join(" "))).toBe(true);
  });
});
