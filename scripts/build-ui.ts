// Bundles the explorer (ui/) into dist/ui with esbuild: one hashed script,
// one hashed stylesheet, and index.html pointing at them. Run by
// `npm run build` (and so by `npm start` through prestart) and by the
// browser tests. Hashed names let the service cache them forever.
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

export async function buildUi(outDir = join(root, "dist", "ui")): Promise<{ outDir: string; files: string[] }> {
  await rm(outDir, { recursive: true, force: true });
  await mkdir(outDir, { recursive: true });
  const result = await esbuild.build({
    entryPoints: [join(root, "ui", "src", "main.ts")],
    bundle: true,
    format: "esm",
    target: "es2022",
    minify: true,
    sourcemap: false,
    entryNames: "[name]-[hash]",
    assetNames: "[name]-[hash]",
    outdir: outDir,
    metafile: true,
    legalComments: "none",
    logLevel: "warning",
  });
  const outputs = Object.keys(result.metafile.outputs).map((p) => basename(p));
  const script = outputs.find((f) => f.endsWith(".js"));
  const style = outputs.find((f) => f.endsWith(".css"));
  if (script === undefined) throw new Error("esbuild wrote no script");
  let html = await readFile(join(root, "ui", "index.html"), "utf8");
  html = html.replace('src="/ui/main.js"', `src="/ui/${script}"`);
  html = html.replace(
    "<!-- build: styles -->",
    style === undefined ? "" : `<link rel="stylesheet" href="/ui/${style}">`,
  );
  await writeFile(join(outDir, "index.html"), html);
  return { outDir, files: [...outputs, "index.html"] };
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { outDir, files } = await buildUi();
  process.stdout.write(`explorer built in ${outDir}: ${files.join(", ")}\n`);
}
