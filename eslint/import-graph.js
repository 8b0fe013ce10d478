// Two rules over the graph of relative imports (static, type-only,
// re-exports, dynamic), read with the TypeScript scanner:
// - no-import-cycle: an import that closes a circle (the imported file
//   reaches back to the importing one) fails, whatever the circle's length.
//   A circle makes load order matter and makes two files one room in all
//   but name; break it by moving what both need into a file of its own.
// - floors: a file of src/ imports only from its own floor or the floors
//   below (the order is in eslint.config.js and docs/architecture.md).
// The graph of the other files is read from disk once per lint run (files
// and folders are few); the file being linted is read from its own text.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import ts from "typescript";

const SOURCE = /\.(ts|mts|js|mjs)$/;
const SKIP = new Set(["node_modules", "dist", "gen", ".git"]);

/** The file a relative specifier names (`./x.js` is `./x.ts` in the source), or undefined. */
export function resolveImport(fromFile, specifier) {
  if (!specifier.startsWith("./") && !specifier.startsWith("../")) return undefined;
  const raw = resolve(dirname(fromFile), specifier);
  const candidates = [
    raw.replace(/\.js$/, ".ts"),
    raw.replace(/\.mjs$/, ".mts"),
    raw,
    `${raw}.ts`,
    join(raw, "index.ts"),
  ];
  return candidates.find((c) => existsSync(c) && statSync(c).isFile());
}

/** The relative specifiers a source text imports (the scanner skips template strings and comments). */
export function specifiersOf(text) {
  return ts.preProcessFile(text, true, true).importedFiles.map((f) => f.fileName);
}

function sourcesUnder(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (SKIP.has(e.name)) return [];
    const path = join(dir, e.name);
    return e.isDirectory() ? sourcesUnder(path) : SOURCE.test(e.name) && !e.name.endsWith(".d.ts") ? [path] : [];
  });
}

/** file -> the files of the graph it imports, for every source file under the given folders. */
export function importGraph(root, folders) {
  const graph = new Map();
  for (const folder of folders) {
    for (const file of sourcesUnder(join(root, folder))) {
      const targets = new Set();
      for (const s of specifiersOf(readFileSync(file, "utf8"))) {
        const t = resolveImport(file, s);
        if (t !== undefined) targets.add(t);
      }
      graph.set(file, targets);
    }
  }
  return graph;
}

/** The shortest way from `from` back to `to` in the graph (a list of files, both ends included), or undefined. */
export function pathBetween(graph, from, to) {
  const previous = new Map([[from, undefined]]);
  const queue = [from];
  while (queue.length > 0) {
    const at = queue.shift();
    if (at === to) {
      const path = [];
      for (let f = to; f !== undefined; f = previous.get(f)) path.unshift(f);
      return path;
    }
    for (const next of graph.get(at) ?? []) {
      if (!previous.has(next)) {
        previous.set(next, at);
        queue.push(next);
      }
    }
  }
  return undefined;
}

/** The floor of a file (index into floors) or undefined when no floor names it. Longest pattern wins. */
export function floorOf(root, file, floors) {
  const rel = relative(root, file).split(sep).join("/");
  let best;
  floors.forEach((floor, i) => {
    for (const pattern of floor.members) {
      const hit = pattern.endsWith("/") ? rel.startsWith(pattern) : rel === pattern;
      if (hit && (best === undefined || pattern.length > best.length)) best = { index: i, length: pattern.length };
    }
  });
  return best?.index;
}

const graphs = new Map();
function graphFor(root, folders) {
  const key = `${root}\0${folders.join("\0")}`;
  let g = graphs.get(key);
  if (g === undefined) {
    g = importGraph(root, folders);
    graphs.set(key, g);
  }
  return g;
}

/** Calls check(node, specifier) for every import, re-export and dynamic import with a literal specifier. */
function eachImport(check) {
  const visit = (node) => {
    const source = node.source;
    if (source && source.type === "Literal" && typeof source.value === "string") check(source, source.value);
  };
  return {
    ImportDeclaration: visit,
    ExportNamedDeclaration: visit,
    ExportAllDeclaration: visit,
    ImportExpression: visit,
  };
}

export const noImportCycle = {
  meta: {
    type: "problem",
    docs: { description: "no circle of imports among the files of the given folders" },
    schema: [
      {
        type: "object",
        properties: { folders: { type: "array", items: { type: "string" } } },
        additionalProperties: false,
      },
    ],
    messages: { circle: "this import closes a circle: {{path}}" },
  },
  create(context) {
    const root = context.cwd;
    const folders = context.options[0]?.folders ?? ["src"];
    const file = context.filename;
    if (!folders.some((f) => !relative(join(root, f), file).startsWith(".."))) return {};
    const graph = graphFor(root, folders);
    return eachImport((node, specifier) => {
      const target = resolveImport(file, specifier);
      if (target === undefined || !graph.has(target)) return;
      const back = pathBetween(graph, target, file);
      if (back === undefined) return;
      const path = [file, ...back].map((f) => relative(root, f).split(sep).join("/")).join(" -> ");
      context.report({ node, messageId: "circle", data: { path } });
    });
  },
};

export const floorsRule = {
  meta: {
    type: "problem",
    docs: { description: "a file imports only from its own floor or the floors below" },
    schema: [
      {
        type: "object",
        properties: {
          floors: {
            type: "array",
            items: {
              type: "object",
              properties: { name: { type: "string" }, members: { type: "array", items: { type: "string" } } },
              required: ["name", "members"],
              additionalProperties: false,
            },
          },
        },
        required: ["floors"],
        additionalProperties: false,
      },
    ],
    messages: {
      up: "{{target}} is on the floor '{{targetFloor}}', above this file's '{{ownFloor}}': an import may only go down (docs/architecture.md)",
      unplaced: "{{file}} is on no floor: add it to a floor in eslint.config.js and docs/architecture.md",
    },
  },
  create(context) {
    const root = context.cwd;
    const floors = context.options[0].floors;
    const file = context.filename;
    const own = floorOf(root, file, floors);
    const rel = (f) => relative(root, f).split(sep).join("/");
    return {
      Program(node) {
        if (own === undefined) context.report({ node, messageId: "unplaced", data: { file: rel(file) } });
      },
      ...eachImport((node, specifier) => {
        if (own === undefined) return;
        const target = resolveImport(file, specifier);
        if (target === undefined) return;
        const theirs = floorOf(root, target, floors);
        if (theirs === undefined || theirs <= own) return;
        context.report({
          node,
          messageId: "up",
          data: { target: rel(target), targetFloor: floors[theirs].name, ownFloor: floors[own].name },
        });
      }),
    };
  },
};

export default { rules: { "no-import-cycle": noImportCycle, floors: floorsRule } };
