// BENCHMARKS.md holds today's figures; the rounds behind them are in
// docs/benchmarks/, one file per topic. Code, tests and docs cite them as
// `docs/benchmarks/<file>.md, "<section>"`. A citation of a file that does
// not exist, or of a section heading it does not hold, would send a reader
// nowhere: both fail here, as do relative links of these pages that lead
// nowhere and a notebook file the index does not list.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const notebook = join(root, "docs/benchmarks");
const CITING = ["src", "test", "bench", "ui", "scripts", "docs", "README.md", "BENCHMARKS.md"];
const SKIP = new Set(["node_modules", ".git", "dist", "data", "coverage", "test-artefacts"]);
const TEXT = /\.(ts|tsx|js|mjs|cjs|md)$/;

function filesUnder(path: string): string[] {
  if (!existsSync(path)) return [];
  if (!statSync(path).isDirectory()) return TEXT.test(path) ? [path] : [];
  return readdirSync(path).flatMap((name) => (SKIP.has(name) ? [] : filesUnder(join(path, name))));
}

/** The text with its line breaks (and a comment's leading `//` or `*`) read as one space, so a citation may wrap. */
function flat(file: string, text: string): string {
  return text.replace(file.endsWith(".md") ? /\s*\n\s*/g : /\s*\n\s*(?:\/\/|\*(?!\/))?\s*/g, " ");
}

interface Citation {
  readonly file: string;
  readonly section: string | undefined;
}

/** Every `BENCHMARKS.md` or `docs/benchmarks/<file>.md` a text names, with the quoted section after it if any. */
function citations(text: string): Citation[] {
  const out: Citation[] = [];
  const pattern =
    /(?<![\w/.-])(BENCHMARKS\.md|docs\/benchmarks\/[\w.-]+\.md)(?:\]\([^)\s]*\))?\)?(?:(?:, |: | \()"([^"]+)")?/g;
  for (const m of text.matchAll(pattern)) out.push({ file: m[1]!, section: m[2] });
  return out;
}

function headings(file: string): string[] {
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => /^#{1,6} /.test(line))
    .map((line) => line.replace(/^#+ /, "").toLowerCase());
}

describe("benchmark citations", () => {
  const files = CITING.flatMap((p) => filesUnder(join(root, p)));

  it("every cited notebook file and section exists", () => {
    const broken: string[] = [];
    let sections = 0;
    for (const file of files) {
      for (const c of citations(flat(file, readFileSync(file, "utf8")))) {
        const target = join(root, c.file);
        if (!existsSync(target)) {
          broken.push(`${relative(root, file)}: ${c.file}`);
          continue;
        }
        if (c.section === undefined) continue;
        sections++;
        const wanted = c.section.toLowerCase();
        if (!headings(target).some((h) => h.includes(wanted)))
          broken.push(`${relative(root, file)}: ${c.file}, "${c.section}"`);
      }
    }
    // Code and docs cite sections in dozens of places: none found means the scan is broken.
    expect(sections).toBeGreaterThan(30);
    expect(broken).toEqual([]);
  });

  it("the benchmark pages' relative links lead somewhere", () => {
    const pages = [join(root, "BENCHMARKS.md"), ...filesUnder(notebook)];
    const broken: string[] = [];
    for (const page of pages) {
      for (const m of readFileSync(page, "utf8").matchAll(/\]\(([^)#\s:]+)(?:#[^)]*)?\)/g)) {
        if (!existsSync(resolve(dirname(page), m[1]!))) broken.push(`${relative(root, page)}: ${m[1]}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it("the notebook's index lists every file of it", () => {
    const index = readFileSync(join(notebook, "README.md"), "utf8");
    const unlisted = readdirSync(notebook).filter((name) => name !== "README.md" && !index.includes(`](${name})`));
    expect(unlisted).toEqual([]);
  });

  it("reads a citation, wrapped or not, with and without a section", () => {
    const doc = ["docs", "benchmarks", "load.md"].join("/");
    const code = `// the floor (${doc},\n// "Round eight") and ${doc}.`;
    expect(citations(flat("x.ts", code))).toEqual([
      { file: doc, section: "Round eight" },
      { file: doc, section: undefined },
    ]);
    expect(citations(`[load](${doc}), "Load against prepared floors"`)).toEqual([
      { file: doc, section: "Load against prepared floors" },
    ]);
  });
});
