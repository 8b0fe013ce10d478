// A folder with an index.ts is a module: code outside it imports the index,
// never an inner file. A module may also have a browser.ts: the part of its
// surface that runs in a browser (the index may need Node), public as well. The rule resolves each relative import (static,
// re-export, dynamic) and, for every folder with an index.ts that holds the
// target but not the importing file, requires the target to be that index.
import { existsSync } from "node:fs";
import { dirname, relative, resolve, sep } from "node:path";

const hasIndex = new Map();
function folderHasIndex(dir) {
  let known = hasIndex.get(dir);
  if (known === undefined) {
    known = existsSync(resolve(dir, "index.ts"));
    hasIndex.set(dir, known);
  }
  return known;
}

const inside = (dir, file) => {
  const rel = relative(dir, file);
  return rel !== "" && !rel.startsWith("..") && !rel.startsWith(sep);
};

/** The folder whose index the import must use instead, or undefined when the import is fine. */
export function boundaryCrossed(fromFile, specifier, root) {
  if (!specifier.startsWith("./") && !specifier.startsWith("../")) return undefined;
  const target = resolve(dirname(fromFile), specifier).replace(/\.js$/, ".ts");
  // Outermost first: src/store before src/store/query.
  const folders = [];
  for (let dir = dirname(target); inside(root, dir) || dir === root; dir = dirname(dir)) {
    folders.unshift(dir);
    if (dir === root) break;
  }
  for (const dir of folders) {
    if (dir === root || inside(dir, fromFile) || !folderHasIndex(dir)) continue;
    if (target !== resolve(dir, "index.ts") && target !== resolve(dir, "browser.ts")) return dir;
  }
  return undefined;
}

export const indexBoundaries = {
  meta: {
    type: "problem",
    docs: { description: "import a folder that has an index.ts only through that index" },
    schema: [],
    messages: {
      inner: "{{specifier}} reaches inside {{folder}}/: import {{folder}}/index.js (or its browser.js) instead",
    },
  },
  create(context) {
    const root = context.cwd;
    const check = (node) => {
      const source = node.source;
      if (!source || source.type !== "Literal" || typeof source.value !== "string") return;
      const folder = boundaryCrossed(context.filename, source.value, root);
      if (folder !== undefined) {
        context.report({
          node: source,
          messageId: "inner",
          data: { specifier: source.value, folder: relative(root, folder) },
        });
      }
    };
    return {
      ImportDeclaration: check,
      ExportNamedDeclaration: check,
      ExportAllDeclaration: check,
      ImportExpression: check,
    };
  },
};

export default { rules: { "index-boundaries": indexBoundaries } };
