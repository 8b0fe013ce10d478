// Lint that fails on warnings (DESIGN.md section 7, habit 7): `npm run lint`
// runs with --max-warnings 0, so every rule here is effectively an error.
import js from "@eslint/js";
import { defineConfig, globalIgnores } from "eslint/config";
import globals from "globals";
import tseslint from "typescript-eslint";
import local from "./eslint/index-boundaries.js";
import importGraph from "./eslint/import-graph.js";

/**
 * The floors of src/, lowest first (docs/architecture.md): a file imports
 * from its own floor or a lower one, never from above. A folder is named
 * with its slash; a file alone is named whole.
 */
const FLOORS = [
  {
    name: "leaves",
    members: [
      "src/config.ts",
      "src/copy-binary.ts",
      "src/errors.ts",
      "src/log.ts",
      "src/node-support.ts",
      "src/time.ts",
    ],
  },
  {
    name: "parts",
    members: [
      "src/schema/",
      "src/protobuf/",
      "src/access/",
      "src/auth/",
      "src/storage/",
      "src/store/",
      "src/parquet/",
      "src/client/",
      "src/tracing/",
      "src/dicom/",
    ],
  },
  { name: "http", members: ["src/http/"] },
  { name: "rpc", members: ["src/rpc/"] },
  { name: "rest", members: ["src/rest/"] },
  {
    name: "assembly",
    members: [
      "src/app.ts",
      "src/main.ts",
      "src/server.ts",
      "src/metrics.ts",
      "src/cors.ts",
      "src/ui-assets.ts",
      "src/ops-routes.ts",
      "src/http-fallback.ts",
      "src/cli/",
    ],
  },
];

export default defineConfig(
  // gen/ is protoc-gen-es output: never edited, never linted (habit 5).
  globalIgnores(["gen/", "dist/", "coverage/", "data/", "node_modules/"]),

  js.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: true,
        tsconfigRootDir: import.meta.dirname,
      },
    },
    linterOptions: {
      // A disable comment that no longer silences anything is noise that hides the next real one.
      reportUnusedDisableDirectives: "error",
    },
    rules: {
      eqeqeq: ["error", "always"],
      "@typescript-eslint/consistent-type-imports": [
        "error",
        { prefer: "type-imports", fixStyle: "inline-type-imports" },
      ],
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
      "@typescript-eslint/no-unused-vars": [
        "error",
        // A leading underscore marks a parameter kept for its position in a signature.
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrors: "none" },
      ],
    },
  },

  {
    // A folder with an index.ts is reached through it only (issue 12): the
    // index is the folder's public surface, its other files are its own.
    files: ["**/*.ts"],
    plugins: { local },
    rules: { "local/index-boundaries": "error" },
  },

  {
    // No circle of imports (issue 29): among the service's files, and among
    // the benchmarks' (which also reach into src/, one way only).
    files: ["src/**/*.ts", "bench/**/*.ts", "bench/**/*.mjs"],
    plugins: { graph: importGraph },
    rules: { "graph/no-import-cycle": ["error", { folders: ["src", "bench"] }] },
  },

  {
    // Imports run down the floors of FLOORS, never up.
    files: ["src/**/*.ts"],
    plugins: { graph: importGraph },
    rules: { "graph/floors": ["error", { floors: FLOORS }] },
  },

  {
    // Errors come from the catalogue (src/errors.ts; docs/errors.md): a refusal
    // made or written anywhere else would miss its reason. Only the catalogue
    // and its REST body writer may build one by hand, and the client's binary
    // codec, whose decoding errors must equal connect's own (no reason).
    files: ["src/**/*.ts"],
    ignores: ["src/errors.ts", "src/http/error-status.ts", "src/client/planned-answers.ts"],
    rules: {
      "no-restricted-syntax": [
        "error",
        {
          selector: "NewExpression[callee.name='ConnectError']",
          message: "Make errors with the catalogue's makers (src/errors.ts), so each carries its reason.",
        },
        {
          selector:
            "ObjectExpression:has(> Property[key.name='code']):has(> Property[key.name='message']:not([value.type='ObjectExpression']))",
          message:
            "Write error bodies with writeRestError (src/http/error-status.ts), which adds the catalogue's reason.",
        },
      ],
    },
  },

  {
    // The service logs through pino so lines carry the request id and redaction;
    // console output would bypass both.
    files: ["src/**/*.ts"],
    rules: { "no-console": "error" },
  },

  {
    files: ["test/**/*.ts", "bench/**/*.ts"],
    rules: {
      // Tests read answers as parsed JSON (REST bodies, logs, metrics) and assert on
      // their shape; typing every intermediate value would only restate the assertion.
      "@typescript-eslint/no-unsafe-assignment": "off",
      "@typescript-eslint/no-unsafe-member-access": "off",
      "@typescript-eslint/no-unsafe-argument": "off",
      "@typescript-eslint/no-unsafe-call": "off",
      "@typescript-eslint/no-unsafe-return": "off",
      // For the same reason a REST or OpenAPI body read with res.json() may be typed `any`.
      "@typescript-eslint/no-explicit-any": "off",
    },
  },

  {
    // Plain JavaScript config files sit outside tsconfig.json: lint them without type information.
    files: ["**/*.js", "**/*.mjs", "**/*.cjs"],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: globals.node },
  },
);
