// `npm start`'s prestart: builds dist/ only when it is older than what it
// is built from (before it, every start compiled the whole service and the
// explorer again, 16-21 s, where the service itself starts in about 2 s).
// dist/ is current when every .ts under src/ and gen/ has its .js in dist/
// written after it and after the build settings, and dist/ui/index.html is
// newer than every file under ui/ and the UI build script. `npm run build`
// still builds unconditionally.
import { spawnSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** What decides the compiled output besides the sources themselves. */
const SETTINGS = ["tsconfig.json", "tsconfig.build.json", "package.json", "package-lock.json"];

function mtime(path: string): number | undefined {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return undefined;
  }
}

function filesUnder(dir: string): string[] {
  try {
    return readdirSync(dir, { recursive: true, encoding: "utf8" })
      .map((rel) => join(dir, rel))
      .filter((p) => statSync(p).isFile());
  } catch {
    return [];
  }
}

/** Why dist/ under `root` must be built again, or undefined when it is current. */
export function staleBecause(root: string): string | undefined {
  const settled = Math.max(0, ...SETTINGS.map((f) => mtime(join(root, f)) ?? 0));
  for (const dir of ["src", "gen"]) {
    for (const source of filesUnder(join(root, dir))) {
      if (!source.endsWith(".ts") || source.endsWith(".d.ts")) continue;
      const rel = source.slice(root.length + 1);
      const built = mtime(join(root, "dist", rel.replace(/\.ts$/, ".js")));
      if (built === undefined) return `dist/ has no build of ${rel}`;
      if (built <= Math.max(mtime(source) ?? 0, settled))
        return `${rel} (or a build setting) changed since it was built`;
    }
  }
  const page = mtime(join(root, "dist", "ui", "index.html"));
  if (page === undefined) return "the explorer is not built";
  for (const source of [...filesUnder(join(root, "ui")), join(root, "scripts", "build-ui.ts")]) {
    if ((mtime(source) ?? 0) >= page) return `${source.slice(root.length + 1)} changed since the explorer was built`;
  }
  return undefined;
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const root = join(dirname(fileURLToPath(import.meta.url)), "..");
  const why = staleBecause(root);
  if (why === undefined) {
    process.stderr.write("dist/ is current: not building (npm run build builds anyway)\n");
  } else {
    process.stderr.write(`building dist/: ${why}\n`);
    const built = spawnSync("npm", ["run", "build"], { cwd: root, stdio: "inherit" });
    process.exit(built.status ?? 1);
  }
}
